package pgstore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state/storetest"
)

// Two owners claiming the same queued entries at once, in batches: no
// entry is ever held by both; a claim that runs out leaves its entries to
// the other owner; an acknowledged entry is claimed by nobody.
func TestAClaimOfManyEntriesGivesEachToOneOwnerAtATime(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	seqs := enqueueShop(t, s, t0, 60)
	until := t0.Add(time.Minute)
	held := map[string][]uint64{}
	for round := range 10 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string][]uint64{}
		for _, owner := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := s.Claim(bg, "esme/shop", seqs, owner, until)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				got[owner] = g
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, seq := range got["a"] {
			if slices.Contains(got["b"], seq) || slices.Contains(held["b"], seq) {
				t.Fatalf("round %d: entry %d claimed by a and b", round, seq)
			}
		}
		for _, seq := range got["b"] {
			if slices.Contains(held["a"], seq) {
				t.Fatalf("round %d: entry %d claimed by b while a holds it", round, seq)
			}
		}
		for o, g := range got {
			held[o] = union(held[o], g)
		}
	}
	if n := len(held["a"]) + len(held["b"]); n != len(seqs) {
		t.Errorf("after 10 rounds a and b hold %d of the %d entries", n, len(seqs))
	}
	// a's claims run out: b takes them; an acknowledged entry is not claimed.
	if err := s.Ack(bg, "esme/shop", seqs[0]); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	exec(t, s.opts.DSN, `UPDATE `+s.opts.Schema+`.queue_entries SET claimed_until_ns = 0`) // run out on the database's clock too
	got, err := s.Claim(bg, "esme/shop", seqs, "b", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, seqs[1:]) {
		t.Errorf("b claimed %v after every claim ran out and entry %d was acknowledged; want %v", got, seqs[0], seqs[1:])
	}
	if got, err := s.Claim(bg, "esme/shop", seqs, "a", t0.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("a claimed %v, %v while b holds every entry", got, err)
	}
	if got, err := s.Claim(bg, "esme/other", seqs, "a", t0.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("a claimed %v, %v of another queue's entries", got, err)
	}
}

func union(a, b []uint64) []uint64 {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}
