package state

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Appends to one record from many goroutines, by Update, AppendHot and
// EnqueueAppend, across the move from the record to the log: every event
// is kept exactly once, each goroutine's in its order.
func TestConcurrentAppendsKeepEveryEventInOrder(t *testing.T) {
	for round := range 5 {
		s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), MinFreeBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		now := time.Now()
		k := Key{Account: "a", Key: "k"}
		if _, _, err := s.Create(ctx, &Record{Key: k, State: Accepted, Created: now, Expires: now.Add(time.Hour), History: []Event{{At: now, Note: "first"}}}); err != nil {
			t.Fatal(err)
		}
		const G, N = 8, 7
		var wg sync.WaitGroup
		for g := range G {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range N {
					e := Event{At: now.Add(time.Duration(g*N+i+1) * time.Millisecond), Note: fmt.Sprintf("g%d-%d", g, i)}
					fn := func(r *Record) error { r.History = append(r.History, e); return nil }
					var err error
					switch (g + i + round) % 3 {
					case 0:
						_, err = s.Update(ctx, k, fn)
					case 1:
						err = s.AppendHot(ctx, k, fn)
					case 2:
						var appended bool
						_, _, appended, err = s.EnqueueAppend(ctx, &QueueEntry{Queue: "q", DedupKey: e.Note, Expires: now.Add(time.Hour)}, k, fn)
						if err == nil && !appended {
							err = fmt.Errorf("not appended")
						}
					}
					if err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		got, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		notes := eventNotes(got.History)
		if len(notes) != 1+G*N || notes[0] != "first" {
			t.Fatalf("round %d: %d events %q; want %d", round, len(notes), notes, 1+G*N)
		}
		for g := range G {
			var mine []string
			for _, n := range notes {
				if len(n) > 2 && n[:2] == fmt.Sprintf("g%d", g) {
					mine = append(mine, n)
				}
			}
			want := make([]string, N)
			for i := range want {
				want[i] = fmt.Sprintf("g%d-%d", g, i)
			}
			if !slices.Equal(mine, want) {
				t.Errorf("round %d: goroutine %d's events %q; want %q", round, g, mine, want)
			}
		}
		s.Close()
	}
}
