package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

func queueOf(t *testing.T, s state.Store) state.Queue {
	t.Helper()
	q, ok := s.(state.Queue)
	if !ok {
		t.Skip("backend has no Queue")
	}
	return q
}

func entry(c *Clock, queue, dedup string, n int) *state.QueueEntry {
	now := c.Now()
	return &state.QueueEntry{
		Queue: queue, DedupKey: dedup, Kind: "receipt", Upstream: "smsc",
		MessageID: fmt.Sprintf("m-%d", n), Stat: "DELIVRD", Command: 0x05,
		Body: []byte(fmt.Sprintf("body %d\x00", n)), Enqueued: now, Expires: now.Add(time.Hour),
	}
}

func mustEnqueue(t *testing.T, q state.Queue, e *state.QueueEntry) uint64 {
	t.Helper()
	seq, dup, err := q.Enqueue(bg, e)
	if err != nil || dup || seq == 0 {
		t.Fatalf("Enqueue(%s %s) = %d, %v, %v; want a new entry", e.Queue, e.MessageID, seq, dup, err)
	}
	return seq
}

// list returns the MessageIDs of List(queue, after, limit).
func list(t *testing.T, q state.Queue, queue string, after uint64, limit int) []string {
	t.Helper()
	es, err := q.List(bg, queue, after, limit)
	if err != nil {
		t.Fatalf("List(%q, %d, %d) = %v", queue, after, limit, err)
	}
	var ids []string
	var last uint64
	for _, e := range es {
		if e.Queue != queue || e.Seq <= last || e.Seq <= after {
			t.Errorf("List(%q, %d, %d) returned %+v after seq %d; want entries of the queue in order", queue, after, limit, e, last)
		}
		last = e.Seq
		ids = append(ids, e.MessageID)
	}
	return ids
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func testQueueOrder(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	var seqs []uint64
	for i := range 5 {
		seqs = append(seqs, mustEnqueue(t, q, entry(c, "shop", "", i)))
	}
	wantIDs(t, "List(all)", list(t, q, "shop", 0, 100), "m-0", "m-1", "m-2", "m-3", "m-4")
	wantIDs(t, "List(limit 2)", list(t, q, "shop", 0, 2), "m-0", "m-1")
	wantIDs(t, "List(after the 2nd)", list(t, q, "shop", seqs[1], 100), "m-2", "m-3", "m-4")
	wantIDs(t, "List(limit 0)", list(t, q, "shop", 0, 0))
	es, _ := q.List(bg, "shop", 0, 1)
	want := entry(c, "shop", "", 0)
	want.Seq = seqs[0]
	if len(es) != 1 || fmt.Sprintf("%+v", normalEntry(es[0])) != fmt.Sprintf("%+v", normalEntry(want)) {
		t.Errorf("List(shop, 0, 1) = %+v; want %+v", es, want)
	}
	depths, err := q.Depths(bg)
	if err != nil || len(depths) != 1 || depths["shop"] != 5 {
		t.Errorf("Depths() = %v, %v; want map[shop:5]", depths, err)
	}
}

func normalEntry(e *state.QueueEntry) state.QueueEntry {
	c := *e
	c.Enqueued, c.Expires = c.Enqueued.UTC(), c.Expires.UTC()
	return c
}

func testQueueDedup(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	first := mustEnqueue(t, q, entry(c, "shop", "smsc/123/delivered", 1))
	seq, dup, err := q.Enqueue(bg, entry(c, "shop", "smsc/123/delivered", 2))
	if err != nil || !dup || seq != first {
		t.Errorf("second Enqueue of one dedup key = %d, %v, %v; want %d, true, nil", seq, dup, err, first)
	}
	mustEnqueue(t, q, entry(c, "shop", "smsc/123/enroute", 3))    // another key
	mustEnqueue(t, q, entry(c, "other", "smsc/123/delivered", 4)) // another queue
	wantIDs(t, "List(shop)", list(t, q, "shop", 0, 100), "m-1", "m-3")
	if err := q.Ack(bg, "shop", first); err != nil {
		t.Fatalf("Ack = %v", err)
	}
	if seq, dup, err := q.Enqueue(bg, entry(c, "shop", "smsc/123/delivered", 5)); err != nil || !dup || seq != first {
		t.Errorf("Enqueue of an acknowledged dedup key = %d, %v, %v; want %d, true, nil (the marker outlives the entry)", seq, dup, err, first)
	}
	c.Advance(time.Hour) // the marker expires with the entry
	mustEnqueue(t, q, entry(c, "shop", "smsc/123/delivered", 6))
	wantIDs(t, "List(shop) after expiry", list(t, q, "shop", 0, 100), "m-6")
}

func testQueueAck(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	var seqs []uint64
	for i := range 4 {
		seqs = append(seqs, mustEnqueue(t, q, entry(c, "shop", "", i)))
	}
	for _, i := range []int{2, 0, 0} { // acking twice is harmless
		if err := q.Ack(bg, "shop", seqs[i]); err != nil {
			t.Fatalf("Ack(shop, %d) = %v", seqs[i], err)
		}
	}
	if err := q.Ack(bg, "other", seqs[1]); err != nil {
		t.Fatalf("Ack(other, %d) = %v", seqs[1], err)
	}
	wantIDs(t, "List after acks", list(t, q, "shop", 0, 100), "m-1", "m-3")
	for _, i := range []int{1, 3} {
		if err := q.Ack(bg, "shop", seqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := q.Depths(bg); err != nil || len(d) != 0 {
		t.Errorf("Depths() with everything acknowledged = %v, %v; want empty", d, err)
	}
}

// testQueueAckAll: a store that acknowledges several entries in one write
// (AckAll) deletes those it names in that queue, and only those.
func testQueueAckAll(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	ba, ok := q.(interface {
		AckAll(ctx context.Context, queue string, seqs []uint64) error
	})
	if !ok {
		t.Skip("no AckAll")
	}
	var seqs []uint64
	for i := range 5 {
		seqs = append(seqs, mustEnqueue(t, q, entry(c, "shop", "", i)))
	}
	other := mustEnqueue(t, q, entry(c, "other", "", 9))
	if err := ba.AckAll(bg, "shop", []uint64{seqs[0], seqs[2], seqs[4], seqs[2], other}); err != nil {
		t.Fatalf("AckAll = %v", err)
	}
	wantIDs(t, "List after AckAll", list(t, q, "shop", 0, 100), "m-1", "m-3")
	wantIDs(t, "List of another queue after AckAll", list(t, q, "other", 0, 100), "m-9")
	if err := ba.AckAll(bg, "shop", nil); err != nil {
		t.Errorf("AckAll of nothing = %v", err)
	}
}

func testQueueExpiry(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	short := entry(c, "shop", "", 0)
	short.Expires = c.Now().Add(time.Minute)
	mustEnqueue(t, q, short)
	forever := entry(c, "shop", "", 1)
	forever.Expires = time.Time{}
	mustEnqueue(t, q, forever)
	mustEnqueue(t, q, entry(c, "shop", "", 2))
	c.Advance(time.Minute)
	wantIDs(t, "List after a minute", list(t, q, "shop", 0, 100), "m-1", "m-2")
	c.Advance(100 * 24 * time.Hour)
	wantIDs(t, "List after 100 days", list(t, q, "shop", 0, 100), "m-1")
	if d, err := q.Depths(bg); err != nil || d["shop"] != 1 {
		t.Errorf("Depths() = %v, %v; want map[shop:1]", d, err)
	}
}

func testQueuesAreExact(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	names := []string{"a", "ab", "a\x00b", "a\x01", "A", "unmatched/smsc"}
	for i, n := range names {
		mustEnqueue(t, q, entry(c, n, "k", i))
	}
	for i, n := range names {
		wantIDs(t, fmt.Sprintf("List(%q)", n), list(t, q, n, 0, 100), fmt.Sprintf("m-%d", i))
	}
	d, err := q.Depths(bg)
	if err != nil || len(d) != len(names) {
		t.Errorf("Depths() = %v, %v; want one entry in each of %q", d, err, names)
	}
}

func testQueueConcurrent(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	const n = 64
	var wg sync.WaitGroup
	seqs := make([]uint64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, dup, err := q.Enqueue(bg, entry(c, "shop", "", i))
			if err != nil || dup {
				t.Errorf("Enqueue #%d = %v, %v", i, dup, err)
			}
			seqs[i] = seq
		}()
	}
	// Concurrent duplicates of one key: exactly one is new.
	var mu sync.Mutex
	fresh := 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, dup, err := q.Enqueue(bg, entry(c, "dups", "same", 0)); err == nil && !dup {
				mu.Lock()
				fresh++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fresh != 1 {
		t.Errorf("16 concurrent Enqueues of one dedup key made %d entries, want 1", fresh)
	}
	es, err := q.List(bg, "shop", 0, 1000)
	if err != nil || len(es) != n {
		t.Fatalf("List = %d entries, %v; want %d", len(es), err, n)
	}
	seen := map[uint64]bool{}
	for _, seq := range seqs {
		if seen[seq] {
			t.Errorf("sequence number %d given twice", seq)
		}
		seen[seq] = true
	}
}

func testQueueFailWrites(t *testing.T, s state.Store, c *Clock) {
	fi := NewFaulty(s)
	q := queueOf(t, fi)
	seq := mustEnqueue(t, q, entry(c, "shop", "", 0))
	diskFull := errors.New("disk full")
	fi.FailWrites(diskFull)
	if _, _, err := q.Enqueue(bg, entry(c, "shop", "k", 1)); !errors.Is(err, diskFull) {
		t.Errorf("Enqueue refused by the store = %v, want an error wrapping %v", err, diskFull)
	}
	if err := q.Ack(bg, "shop", seq); !errors.Is(err, diskFull) {
		t.Errorf("Ack refused by the store = %v, want an error wrapping %v", err, diskFull)
	}
	fi.FailWrites(nil)
	wantIDs(t, "List after refused writes", list(t, q, "shop", 0, 100), "m-0")
	mustEnqueue(t, q, entry(c, "shop", "k", 2)) // the refused dedup key left no marker
}

func testQueueClosed(t *testing.T, s state.Store, c *Clock) {
	q := queueOf(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]func() error{
		"Enqueue":       func() error { _, _, err := q.Enqueue(bg, entry(c, "shop", "", 0)); return err },
		"List":          func() error { _, err := q.List(bg, "shop", 0, 10); return err },
		"Ack":           func() error { return q.Ack(bg, "shop", 1) },
		"Depths":        func() error { _, err := q.Depths(bg); return err },
		"ByProxyID":     func() error { _, err := s.ByProxyID(bg, "acme", "p"); return err },
		"UnknownByAddr": func() error { _, err := s.UnknownByAddr(bg, "smsc", [16]byte{1}); return err },
	}
	for name, call := range checks {
		if err := call(); !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}
