package state_test

import (
	"context"
	"errors"
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

// acceptedWithHistory creates a record accepted by upstream "smsc" with id
// "m1" and n events in its history, through Update as the engine writes it.
// storeWithAccepted opens a Badger store (closed at the end of the test)
// holding the accepted record k1 with events history events.
func storeWithAccepted(t *testing.T, events int) (context.Context, *state.BadgerStore, state.Key, time.Time) {
	t.Helper()
	s := openBadger(t, t.TempDir(), nil)
	t.Cleanup(func() { s.Close() })
	now := time.Now()
	k := state.Key{Account: "shop", Key: "k1"}
	acceptedWithHistory(t, s, k, now, events)
	return context.Background(), s, k, now
}

func acceptedWithHistory(t *testing.T, s *state.BadgerStore, k state.Key, now time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	rec := record(k, now)
	rec.History = []state.Event{{At: now, State: state.Sent, Note: "event 0"}}
	if _, _, err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		_, err := s.Update(ctx, k, func(r *state.Record) error {
			r.State, r.Upstream, r.MessageID = state.Accepted, "smsc", "m1"
			r.History = append(r.History, state.Event{At: now, State: state.Accepted, Note: fmt.Sprint("event ", i)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// notes lists the notes of h.
func notes(h []state.Event) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = e.Note
	}
	return out
}

// AppendHot does not read the history log, yet the events it appends
// come after every stored one and the record's other changes are stored,
// as Update stores them. A short history comes with the record (fn sees
// it whole); once it has moved to the log, fn sees the first event only.
func TestBadgerAppendHotKeepsTheWholeHistory(t *testing.T) {
	ctx, s, k, now := storeWithAccepted(t, 4)
	var seen int
	err := s.AppendHot(ctx, k, func(r *state.Record) error {
		seen = len(r.History)
		r.Delivery, r.DeliveryAt = state.DeliveryDelivered, now
		r.History = append(r.History, state.Event{At: now, State: r.State, Note: "receipt"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 4 {
		t.Errorf("AppendHot's fn saw %d events of a history of 4 kept with the record; want 4", seen)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"event 0", "event 1", "event 2", "event 3", "receipt"}
	if fmt.Sprint(notes(rec.History)) != fmt.Sprint(want) || rec.Delivery != state.DeliveryDelivered {
		t.Errorf("after AppendHot: history %q, delivery %q; want %q, delivered", notes(rec.History), rec.Delivery, want)
	}
	// A second one appends after the first, the history (5 events) being
	// in the log now.
	if err := s.AppendHot(ctx, k, func(r *state.Record) error {
		seen = len(r.History)
		r.History = append(r.History, state.Event{At: now, State: r.State, Note: "receipt 2"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 1 {
		t.Errorf("AppendHot's fn saw %d events of a history of 5 in the log; want the first only", seen)
	}
	if rec, err = s.Get(ctx, k); err != nil || fmt.Sprint(notes(rec.History)) != fmt.Sprint(append(want, "receipt 2")) {
		t.Errorf("after a second AppendHot: history %q, %v; want %q", notes(rec.History), err, append(want, "receipt 2"))
	}
}

// An AppendHot whose fn does more than append (here: it extends the
// record's life, so every event logged before needs the new TTL) is an
// Update: the history it saw is the whole one and stays whole.
func TestBadgerAppendHotThatChangesExpiresIsAnUpdate(t *testing.T) {
	ctx, s, k, now := storeWithAccepted(t, 3)
	var seen []int
	if err := s.AppendHot(ctx, k, func(r *state.Record) error {
		seen = append(seen, len(r.History))
		r.Expires = r.Expires.Add(time.Hour)
		r.History = append(r.History, state.Event{At: now, State: r.State, Note: "later"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 || seen[len(seen)-1] != 3 {
		t.Errorf("fn saw histories of %v events; want the last call to see all 3", seen)
	}
	rec, err := s.Get(ctx, k)
	want := []string{"event 0", "event 1", "event 2", "later"}
	if err != nil || fmt.Sprint(notes(rec.History)) != fmt.Sprint(want) || !rec.Expires.Equal(now.Add(73*time.Hour)) {
		t.Errorf("after AppendHot: history %q, expires %v, %v; want %q, an hour later", notes(rec.History), rec.Expires, err, want)
	}
}

// ByMessageIDHot finds what ByMessageID finds, without the history, and
// nothing for an id no record was accepted with.
func TestBadgerByMessageIDHot(t *testing.T) {
	ctx, s, k, _ := storeWithAccepted(t, 3)
	got, err := s.ByMessageIDHot(ctx, "smsc", "m1")
	if err != nil || got.Key != k || got.MessageID != "m1" || got.History != nil {
		t.Fatalf("ByMessageIDHot(smsc, m1) = %+v, %v; want record %v without history", got, err, k)
	}
	for _, q := range [][2]string{{"smsc", "m2"}, {"other", "m1"}} {
		if _, err := s.ByMessageIDHot(ctx, q[0], q[1]); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("ByMessageIDHot(%s, %s) = %v; want ErrNotFound", q[0], q[1], err)
		}
	}
}

// AckAll deletes every entry it names, durably, and leaves the others and
// the dedup markers.
func TestBadgerAckAllDeletesTheEntriesItNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openBadger(t, dir, nil)
	now := time.Now()
	var seqs []uint64
	for i := range 5 {
		seq, _, err := s.Enqueue(ctx, &state.QueueEntry{Queue: "shop", DedupKey: fmt.Sprint("k", i), Command: 5, Enqueued: now, Expires: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := s.AckAll(ctx, "shop", []uint64{seqs[0], seqs[2], seqs[4]}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBadger(t, dir, nil)
	defer s.Close()
	es, err := s.List(ctx, "shop", 0, 10)
	if err != nil || len(es) != 2 || es[0].Seq != seqs[1] || es[1].Seq != seqs[3] {
		t.Fatalf("List after AckAll and a reopen = %d entries, %v; want %d and %d", len(es), err, seqs[1], seqs[3])
	}
	if seq, dup, err := s.Enqueue(ctx, &state.QueueEntry{Queue: "shop", DedupKey: "k2", Command: 5, Enqueued: now, Expires: now.Add(time.Hour)}); err != nil || !dup || seq != seqs[2] {
		t.Errorf("Enqueue of an acknowledged key = %d, %v, %v; want %d, dup", seq, dup, err, seqs[2])
	}
}

// EnqueueAppend queues the entry and appends to the record together; a
// duplicate entry changes neither; for a record that is not there the
// entry is queued alone and says so.
func TestBadgerEnqueueAppendWritesBothOrNeither(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openBadger(t, dir, nil)
	now := time.Now()
	k := state.Key{Account: "shop", Key: "k1"}
	acceptedWithHistory(t, s, k, now, 3)
	entry := &state.QueueEntry{Queue: "esme/shop", DedupKey: "r1", Command: 5, Enqueued: now, Expires: now.Add(time.Hour)}
	mark := func(note string) func(*state.Record) error {
		return func(r *state.Record) error {
			r.Delivery = state.DeliveryDelivered
			r.History = append(r.History, state.Event{At: now, State: r.State, Note: note})
			return nil
		}
	}
	seq, dup, appended, err := s.EnqueueAppend(ctx, entry, k, mark("receipt"))
	if err != nil || dup || !appended || seq == 0 {
		t.Fatalf("EnqueueAppend = %d, %v, %v, %v; want a new entry, appended", seq, dup, appended, err)
	}
	if seq2, dup, appended, err := s.EnqueueAppend(ctx, entry, k, mark("again")); err != nil || !dup || appended || seq2 != seq {
		t.Errorf("EnqueueAppend of a duplicate = %d, %v, %v, %v; want %d, dup, not appended", seq2, dup, appended, err, seq)
	}
	gone := &state.QueueEntry{Queue: "esme/shop", DedupKey: "r2", Command: 5, Enqueued: now, Expires: now.Add(time.Hour)}
	if _, dup, appended, err := s.EnqueueAppend(ctx, gone, state.Key{Account: "shop", Key: "nothing"}, mark("x")); err != nil || dup || appended {
		t.Errorf("EnqueueAppend for no record = %v, %v, %v; want queued, not appended", dup, appended, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBadger(t, dir, nil)
	defer s.Close()
	rec, err := s.Get(ctx, k)
	want := []string{"event 0", "event 1", "event 2", "receipt"}
	if err != nil || fmt.Sprint(notes(rec.History)) != fmt.Sprint(want) || rec.Delivery != state.DeliveryDelivered {
		t.Errorf("record after a reopen: history %q, delivery %q, %v; want %q, delivered", notes(rec.History), rec.Delivery, err, want)
	}
	if es, err := s.List(ctx, "esme/shop", 0, 10); err != nil || len(es) != 2 || es[0].Seq != seq {
		t.Errorf("queue after a reopen: %d entries, %v; want 2, the first %d", len(es), err, seq)
	}
}
