package state_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// Queued entries, dedup markers and the sequence counter survive a
// restart: entries enqueued after it sort after the old ones.
func TestBadgerQueueDurableAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Now()
	e := func(i int, dedup string) *state.QueueEntry {
		return &state.QueueEntry{Queue: "shop", DedupKey: dedup, MessageID: fmt.Sprint(i), Command: 5, Body: []byte{byte(i)}, Enqueued: now, Expires: now.Add(time.Hour)}
	}
	s := openBadger(t, dir, nil)
	var last uint64
	for i := range 10 {
		seq, _, err := s.Enqueue(ctx, e(i, fmt.Sprint("k", i)))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if err := s.Ack(ctx, "shop", last); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openBadger(t, dir, nil)
	defer s.Close()
	if seq, dup, err := s.Enqueue(ctx, e(99, "k9")); err != nil || !dup || seq != last {
		t.Errorf("Enqueue of an acknowledged key after reopen = %d, %v, %v; want %d, true, nil", seq, dup, err, last)
	}
	seq, dup, err := s.Enqueue(ctx, e(10, "k10"))
	if err != nil || dup || seq <= last {
		t.Errorf("Enqueue after reopen = %d, %v, %v; want a sequence number above %d", seq, dup, err, last)
	}
	es, err := s.List(ctx, "shop", 0, 100)
	if err != nil || len(es) != 10 {
		t.Fatalf("List after reopen = %d entries, %v; want 10", len(es), err)
	}
	for i, got := range es {
		want := i
		if i == 9 {
			want = 10
		}
		if got.MessageID != fmt.Sprint(want) || len(got.Body) != 1 || got.Body[0] != byte(want) {
			t.Errorf("entry %d after reopen = %+v; want message %d", i, got, want)
		}
	}
}
