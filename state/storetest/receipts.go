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

// receiptWriter is what a store offers the receipt intake so that a
// receipt costs one durable write (package dlr uses it when the store has
// it): the record found by message id without its history, events
// appended without reading the history, and the receipt's entry queued
// with the record's mark in one write.
type receiptWriter interface {
	ByMessageIDHot(ctx context.Context, upstream, id string) (*state.Record, error)
	AppendHot(ctx context.Context, k state.Key, fn func(*state.Record) error) error
	EnqueueAppend(ctx context.Context, e *state.QueueEntry, k state.Key, fn func(*state.Record) error) (seq uint64, dup, appended bool, err error)
}

func receiptWriterOf(t *testing.T, s state.Store) receiptWriter {
	t.Helper()
	w, ok := s.(receiptWriter)
	if !ok {
		t.Skip("backend has no EnqueueAppend, AppendHot and ByMessageIDHot")
	}
	return w
}

// acceptedRecord creates under k a record accepted by smsc as message id,
// with events notes "event 0" … "event n-1" (the first written by Create,
// the others by Updates).
func acceptedRecord(t *testing.T, s state.Store, c *Clock, k state.Key, id string, n int) *state.Record {
	t.Helper()
	rec := newRecord(c, k, "o")
	rec.History = []state.Event{{At: c.Now(), State: state.Sent, Note: "event 0"}}
	mustCreate(t, s, rec)
	for i := 1; i < n; i++ {
		rec = mustUpdate(t, s, k, func(r *state.Record) {
			r.State, r.Upstream, r.MessageID = state.Accepted, "smsc", id
			r.History = append(r.History, state.Event{At: c.Now(), State: state.Accepted, Note: fmt.Sprint("event ", i)})
		})
	}
	return rec
}

// receiptMark is the change a receipt makes to the record it matched (as
// package dlr makes it): delivered, with an event noted note; another
// record under the key (matched's key renewed) is left alone
// (state.ErrAbort).
func receiptMark(matched *state.Record, at time.Time, note string) func(*state.Record) error {
	return func(r *state.Record) error {
		if !r.Created.Equal(matched.Created) {
			return state.ErrAbort
		}
		r.Delivery, r.DeliveryAt, r.Updated = state.DeliveryDelivered, at, at
		r.History = append(r.History, state.Event{At: at, State: r.State, MessageID: r.MessageID, Note: note})
		return nil
	}
}

// marked is rec as receiptMark(rec, at, notes...) leaves it, each note in
// turn.
func marked(rec *state.Record, at time.Time, notes ...string) *state.Record {
	want := rec.Clone()
	for _, n := range notes {
		_ = receiptMark(rec, at, n)(want)
	}
	want.History = state.CapHistory(want.History)
	return want
}

func wantNotes(t *testing.T, s state.Store, k state.Key, what string, want ...string) {
	t.Helper()
	rec, err := s.Get(bg, k)
	if err != nil {
		t.Fatalf("%s: Get(%v) = %v", what, k, err)
	}
	got := make([]string, len(rec.History))
	for i, e := range rec.History {
		got[i] = e.Note
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: history %q, want %q", what, got, want)
	}
}

// testEnqueueAppendWritesBoth: the receipt's entry is queued and the
// record gets its mark after every stored event, its other fields as an
// Update would leave them.
func testEnqueueAppendWritesBoth(t *testing.T, s state.Store, c *Clock) {
	w, q := receiptWriterOf(t, s), queueOf(t, s)
	k := state.Key{Account: "shop", Key: "k1"}
	rec := acceptedRecord(t, s, c, k, "m1", 4)
	c.Advance(time.Second)
	seq, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r1", 1), k, receiptMark(rec, c.Now(), "receipt"))
	if err != nil || dup || !appended || seq == 0 {
		t.Fatalf("EnqueueAppend = %d, %v, %v, %v; want a new entry, appended", seq, dup, appended, err)
	}
	wantIDs(t, "List after EnqueueAppend", list(t, q, "esme/shop", 0, 10), "m-1")
	wantGet(t, s, k, marked(rec, c.Now(), "receipt"))
	// An entry without dedup key is queued (and the record marked) too.
	if _, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "", 2), k, receiptMark(rec, c.Now(), "receipt 2")); err != nil || dup || !appended {
		t.Fatalf("EnqueueAppend without dedup key = %v, %v, %v; want a new entry, appended", dup, appended, err)
	}
	wantIDs(t, "List after a second EnqueueAppend", list(t, q, "esme/shop", 0, 10), "m-1", "m-2")
	wantGet(t, s, k, marked(rec, c.Now(), "receipt", "receipt 2"))
	// A full history keeps its first event and the latest.
	full := state.Key{Account: "shop", Key: "full"}
	rec = acceptedRecord(t, s, c, full, "m2", state.MaxHistory)
	if _, _, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r3", 3), full, receiptMark(rec, c.Now(), "receipt")); err != nil || !appended {
		t.Fatalf("EnqueueAppend to a full history = %v, %v; want appended", appended, err)
	}
	wantGet(t, s, full, marked(rec, c.Now(), "receipt"))
}

// testEnqueueAppendDuplicateChangesNothing: a receipt whose dedup key is
// queued already is reported a duplicate, with the first one's sequence
// number, and neither queues a second entry nor marks the record again.
func testEnqueueAppendDuplicateChangesNothing(t *testing.T, s state.Store, c *Clock) {
	w, q := receiptWriterOf(t, s), queueOf(t, s)
	k := state.Key{Account: "shop", Key: "k1"}
	rec := acceptedRecord(t, s, c, k, "m1", 3)
	seq, _, _, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r1", 1), k, receiptMark(rec, c.Now(), "receipt"))
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	seq2, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r1", 2), k, receiptMark(rec, c.Now(), "again"))
	if err != nil || !dup || appended || seq2 != seq {
		t.Errorf("EnqueueAppend of a duplicate = %d, %v, %v, %v; want %d, dup, not appended", seq2, dup, appended, err, seq)
	}
	wantIDs(t, "List after a duplicate", list(t, q, "esme/shop", 0, 10), "m-1")
	wantNotes(t, s, k, "after a duplicate", "event 0", "event 1", "event 2", "receipt")
}

// testEnqueueAppendLeavesARenewedRecordAlone: when the key holds another
// record than the one the receipt matched (the mark says state.ErrAbort),
// the entry is queued all the same and the record is untouched; for a key
// that holds nothing, the entry is queued alone.
func testEnqueueAppendLeavesARenewedRecordAlone(t *testing.T, s state.Store, c *Clock) {
	w, q := receiptWriterOf(t, s), queueOf(t, s)
	k := state.Key{Account: "shop", Key: "k1"}
	matched := acceptedRecord(t, s, c, k, "m1", 2)
	c.Advance(time.Second)
	renewed := newRecord(c, k, "o2")
	renewed.History = []state.Event{{At: c.Now(), State: state.Sent, Note: "renewed"}}
	if err := s.Replace(bg, matched, renewed); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Get(bg, k)
	if err != nil {
		t.Fatal(err)
	}
	seq, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r1", 1), k, receiptMark(matched, c.Now(), "receipt"))
	if err != nil || dup || appended || seq == 0 {
		t.Errorf("EnqueueAppend for a renewed record = %d, %v, %v, %v; want a new entry, not appended", seq, dup, appended, err)
	}
	wantGet(t, s, k, stored)
	gone := state.Key{Account: "shop", Key: "nothing"}
	if _, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", "r2", 2), gone, receiptMark(matched, c.Now(), "x")); err != nil || dup || appended {
		t.Errorf("EnqueueAppend for no record = %v, %v, %v; want queued, not appended", dup, appended, err)
	}
	wantGet(t, s, gone, nil)
	wantIDs(t, "List", list(t, q, "esme/shop", 0, 10), "m-1", "m-2")
}

// testEnqueueAppendConcurrent: receipts of one record queued at once —
// distinct ones and repeats of one — each queue one entry per dedup key,
// and the record gets exactly one mark per entry queued, when the caller
// marks the record itself for those EnqueueAppend did not (as the
// receipt intake does).
func testEnqueueAppendConcurrent(t *testing.T, s state.Store, c *Clock) {
	w, q := receiptWriterOf(t, s), queueOf(t, s)
	k := state.Key{Account: "shop", Key: "k1"}
	rec := acceptedRecord(t, s, c, k, "m1", 2)
	const distinct, repeats = 12, 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh = map[string]int{}
	)
	receipt := func(dedup, note string, n int) {
		defer wg.Done()
		mark := receiptMark(rec, c.Now(), note)
		_, dup, appended, err := w.EnqueueAppend(bg, entry(c, "esme/shop", dedup, n), k, mark)
		if err != nil {
			t.Errorf("EnqueueAppend(%s) = %v", dedup, err)
			return
		}
		if dup {
			return
		}
		mu.Lock()
		fresh[dedup]++
		mu.Unlock()
		if !appended {
			if err := w.AppendHot(bg, k, mark); err != nil {
				t.Errorf("AppendHot(%s) = %v", note, err)
			}
		}
	}
	var want []string
	for i := range distinct {
		wg.Add(1)
		go receipt(fmt.Sprint("r", i), fmt.Sprint("receipt ", i), i)
		want = append(want, fmt.Sprint("receipt ", i))
	}
	for i := range repeats {
		wg.Add(1)
		go receipt("same", "same", distinct+i)
	}
	wg.Wait()
	if len(fresh) != distinct+1 || fresh["same"] != 1 {
		t.Errorf("entries queued per dedup key: %v; want one for each of %d keys", fresh, distinct+1)
	}
	if es, err := q.List(bg, "esme/shop", 0, 100); err != nil || len(es) != distinct+1 {
		t.Errorf("List = %d entries, %v; want %d", len(es), err, distinct+1)
	}
	got, err := s.Get(bg, k)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range got.History[2:] {
		count[e.Note]++
	}
	want = append(want, "same")
	for _, n := range want {
		if count[n] != 1 {
			t.Errorf("mark %q is in the history %d times; want once (history: %v)", n, count[n], count)
		}
	}
	if len(got.History) != 2+len(want) {
		t.Errorf("history has %d events; want %d", len(got.History), 2+len(want))
	}
}

// testAppendHotAppendsAfterTheStoredHistory: AppendHot stores the
// record's change and the events fn appends after every stored one,
// capped like any history (the first event and the latest ones).
func testAppendHotAppendsAfterTheStoredHistory(t *testing.T, s state.Store, c *Clock) {
	w := receiptWriterOf(t, s)
	k := state.Key{Account: "shop", Key: "k1"}
	rec := acceptedRecord(t, s, c, k, "m1", 4)
	c.Advance(time.Second)
	if err := w.AppendHot(bg, k, receiptMark(rec, c.Now(), "receipt")); err != nil {
		t.Fatalf("AppendHot = %v", err)
	}
	wantGet(t, s, k, marked(rec, c.Now(), "receipt"))
	if err := w.AppendHot(bg, k, receiptMark(rec, c.Now(), "receipt 2")); err != nil {
		t.Fatalf("second AppendHot = %v", err)
	}
	wantNotes(t, s, k, "after two AppendHot", "event 0", "event 1", "event 2", "event 3", "receipt", "receipt 2")
	if err := w.AppendHot(bg, k, func(*state.Record) error { return state.ErrAbort }); !errors.Is(err, state.ErrAbort) {
		t.Errorf("AppendHot whose fn aborts = %v; want ErrAbort", err)
	}
	if err := w.AppendHot(bg, state.Key{Account: "shop", Key: "nothing"}, receiptMark(rec, c.Now(), "x")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("AppendHot of no record = %v; want ErrNotFound", err)
	}

	// A full history keeps its first event and the latest.
	full := state.Key{Account: "shop", Key: "full"}
	rec = acceptedRecord(t, s, c, full, "m2", state.MaxHistory)
	if err := w.AppendHot(bg, full, receiptMark(rec, c.Now(), "receipt")); err != nil {
		t.Fatalf("AppendHot = %v", err)
	}
	wantGet(t, s, full, marked(rec, c.Now(), "receipt"))
}

// testByMessageIDHot: ByMessageIDHot finds the record ByMessageID finds,
// without its history, and nothing for an id no record holds.
func testByMessageIDHot(t *testing.T, s state.Store, c *Clock) {
	w := receiptWriterOf(t, s)
	k := state.Key{Account: "shop", Key: "k1", Segment: "2/3"}
	rec := acceptedRecord(t, s, c, k, "m1", 3)
	got, err := w.ByMessageIDHot(bg, "smsc", "m1")
	want := rec.Clone()
	want.History = nil
	if err != nil || !same(got, want) {
		t.Fatalf("ByMessageIDHot(smsc, m1) = %+v, %v;\nwant %+v", got, err, want)
	}
	for _, q := range [][2]string{{"smsc", "m2"}, {"other", "m1"}, {"smsc", ""}} {
		if _, err := w.ByMessageIDHot(bg, q[0], q[1]); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("ByMessageIDHot(%q, %q) = %v; want ErrNotFound", q[0], q[1], err)
		}
	}
	c.Advance(time.Hour) // expired
	if _, err := w.ByMessageIDHot(bg, "smsc", "m1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("ByMessageIDHot of an expired record = %v; want ErrNotFound", err)
	}
}
