package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// acceptedWithHistory creates a record accepted by smsc as m1, with n
// events noted "event 0" … "event n-1".
func acceptedWithHistory(t *testing.T, s *Store, k state.Key, now time.Time, n int) *state.Record {
	t.Helper()
	rec := sentRecord(now, k.Key, "test-1/1", 1)
	rec.Key = k
	rec.History[0].Note = "event 0"
	mustCreate(t, s, rec)
	for i := 1; i < n; i++ {
		var err error
		rec, err = s.Update(bg, k, func(r *state.Record) error {
			r.State, r.MessageID = state.Accepted, "m1"
			r.History = append(r.History, state.Event{At: now, State: state.Accepted, Note: fmt.Sprint("event ", i)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// deliveredMark marks the record delivered with an event noted note,
// unless the key holds another record than matched; seen gets the number
// of events fn was shown.
func deliveredMark(matched *state.Record, now time.Time, note string, seen *int) func(*state.Record) error {
	return func(r *state.Record) error {
		if seen != nil {
			*seen = len(r.History)
		}
		if !r.Created.Equal(matched.Created) {
			return state.ErrAbort
		}
		r.Delivery, r.DeliveryAt = state.DeliveryDelivered, now
		r.History = append(r.History, state.Event{At: now, State: r.State, Note: note})
		return nil
	}
}

// intakeReceipt takes receipt i of the record matched under k as the
// receipt intake does: queued with its mark by EnqueueAppend, or marked
// by AppendHot when EnqueueAppend left the mark to its caller. The entry
// must be new.
func intakeReceipt(s *Store, k state.Key, matched *state.Record, now time.Time, i int) error {
	mark := deliveredMark(matched, now, fmt.Sprint("receipt ", i), nil)
	_, dup, appended, err := s.EnqueueAppend(bg, receiptEntry(now, fmt.Sprint("r", i)), k, mark)
	switch {
	case err != nil || dup:
		return fmt.Errorf("EnqueueAppend #%d = %v, %v; want a new entry", i, dup, err)
	case !appended:
		if err := s.AppendHot(bg, k, mark); err != nil {
			return fmt.Errorf("AppendHot #%d = %v", i, err)
		}
	}
	return nil
}

func receiptEntry(now time.Time, dedup string) *state.QueueEntry {
	return &state.QueueEntry{Queue: "esme/acme", DedupKey: dedup, Kind: "receipt", Upstream: "smsc", MessageID: "m1",
		Stat: "DELIVRD", Command: 5, Body: []byte("id:m1 stat:DELIVRD"), Enqueued: now, Expires: now.Add(time.Hour)}
}

// A receipt's intake on PostgreSQL is one write request of one batch (one
// transaction): the entry queued and the record marked together, the
// record read without its history (fn is shown its first event only) and
// the mark appended after every stored event.
func TestEnqueueAppendIsOneWriteOfOneTransaction(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, s, k, now, 5)
	batches0, ops0, _ := s.CommitStats()
	var seen int
	seq, dup, appended, err := s.EnqueueAppend(bg, receiptEntry(now, "r1"), k, deliveredMark(rec, now, "receipt", &seen))
	if err != nil || dup || !appended || seq == 0 {
		t.Fatalf("EnqueueAppend = %d, %v, %v, %v; want a new entry, appended", seq, dup, appended, err)
	}
	if batches, ops, _ := s.CommitStats(); batches-batches0 != 1 || ops-ops0 != 1 {
		t.Errorf("EnqueueAppend committed %d batches of %d write requests; want 1 of 1", batches-batches0, ops-ops0)
	}
	if seen != 1 {
		t.Errorf("the mark was shown %d events; want the first only (the history is not read)", seen)
	}
	got := mustGet(t, s, k)
	want := []string{"event 0", "event 1", "event 2", "event 3", "event 4", "receipt"}
	if fmt.Sprint(notes(got.History)) != fmt.Sprint(want) || got.Delivery != state.DeliveryDelivered {
		t.Errorf("record after EnqueueAppend: history %q, delivery %q; want %q, delivered", notes(got.History), got.Delivery, want)
	}
	hot, err := s.ByMessageIDHot(bg, "smsc", "m1")
	if err != nil || hot.Key != k || hot.History != nil || hot.Delivery != state.DeliveryDelivered {
		t.Errorf("ByMessageIDHot(smsc, m1) = %+v, %v; want %v delivered, without history", hot, err, k)
	}
}

// When the transaction of an EnqueueAppend fails — in the record's write
// or in the entry's — neither is written: no entry, no dedup marker (the
// receipt's retry is not a duplicate), the record as it was.
func TestEnqueueAppendThatFailsWritesNeither(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	s := openTest(t, Options{DSN: dsn})
	schema := s.opts.Schema
	exec(t, dsn, `CREATE FUNCTION `+schema+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test'; END $$`)
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, s, k, now, 2)
	for i, table := range []string{"records", "queue_entries"} {
		t.Run(table, func(t *testing.T) {
			exec(t, dsn, `CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON `+schema+`.`+table+
				` FOR EACH ROW EXECUTE FUNCTION `+schema+`.refuse()`)
			dedup := fmt.Sprint("r", i)
			_, _, _, err := s.EnqueueAppend(bg, receiptEntry(now, dedup), k, deliveredMark(rec, now, "receipt", nil))
			exec(t, dsn, `DROP TRIGGER refuse ON `+schema+`.`+table)
			if err == nil {
				t.Fatalf("EnqueueAppend with %s refusing writes = nil; want an error", table)
			}
			if es, err := s.List(bg, "esme/acme", 0, 10); err != nil || len(es) != 0 {
				t.Errorf("List after a failed EnqueueAppend = %d entries, %v; want none", len(es), err)
			}
			if got := mustGet(t, s, k); fmt.Sprint(notes(got.History)) != "[event 0 event 1]" || got.Delivery != "" {
				t.Errorf("record after a failed EnqueueAppend: history %q, delivery %q; want it unchanged", notes(got.History), got.Delivery)
			}
			seq, dup, appended, err := s.EnqueueAppend(bg, receiptEntry(now, dedup), k, deliveredMark(rec, now, "receipt", nil))
			if err != nil || dup || !appended {
				t.Fatalf("retry of a failed EnqueueAppend = %v, %v, %v; want a new entry, appended", dup, appended, err)
			}
			if err := s.Ack(bg, "esme/acme", seq); err != nil {
				t.Fatal(err)
			}
			rec, err = s.Update(bg, k, func(r *state.Record) error { // back to unmarked
				r.Delivery, r.DeliveryAt, r.History = "", time.Time{}, r.History[:2]
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Receipts of one record taken in by two instances at once: each queues
// its entry (the other instance is notified), and with the intake's own
// AppendHot for those EnqueueAppend did not mark (another writer got in
// between), the record carries every receipt's mark exactly once.
func TestEnqueueAppendAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b"})
	notified := make(chan string, 64)
	b.Subscribe(func(q string) {
		select {
		case notified <- q:
		default:
		}
	})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, a, k, now, 2)
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := intakeReceipt(s, k, rec, now, i); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if es, err := a.List(bg, "esme/acme", 0, 100); err != nil || len(es) != n {
		t.Errorf("List = %d entries, %v; want %d", len(es), err, n)
	}
	count := map[string]int{}
	for _, e := range mustGet(t, a, k).History[2:] {
		count[e.Note]++
	}
	for i := range n {
		if c := count[fmt.Sprint("receipt ", i)]; c != 1 {
			t.Errorf("receipt %d marked %d times; want once", i, c)
		}
	}
	// The LISTEN may start after the receipts: enqueue until one is seen.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		if _, _, _, err := a.EnqueueAppend(bg, receiptEntry(now, fmt.Sprint("late", i)), k, deliveredMark(rec, now, "late", nil)); err != nil {
			t.Fatal(err)
		}
		select {
		case q := <-notified:
			if q != "esme/acme" {
				t.Fatalf("notified of queue %q, want esme/acme", q)
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no notification of another instance's EnqueueAppend within 10s")
		}
	}
}

// A record written by someone else between the hot read of EnqueueAppend
// or AppendHot and their write is not overwritten with what was read: the
// entry is queued without the mark (appended false), and AppendHot applies
// the mark to the record as it is now.
func TestAppendsDoNotOverwriteAWriteMadeSinceTheirRead(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, s, k, now, 2)
	// meanwhile runs mark, the first time after another writer set the
	// record's Status to status (as another instance's Update would).
	meanwhile := func(status uint32, mark func(*state.Record) error) func(*state.Record) error {
		first := true
		return func(r *state.Record) error {
			if first {
				first = false
				if _, err := s.Update(bg, k, func(r *state.Record) error { r.Status = status; return nil }); err != nil {
					return err
				}
			}
			return mark(r)
		}
	}
	_, dup, appended, err := s.EnqueueAppend(bg, receiptEntry(now, "r1"), k, meanwhile(7, deliveredMark(rec, now, "receipt", nil)))
	if err != nil || dup || appended {
		t.Fatalf("EnqueueAppend with a write since its read = %v, %v, %v; want a new entry, not appended", dup, appended, err)
	}
	if got := mustGet(t, s, k); got.Status != 7 || fmt.Sprint(notes(got.History)) != "[event 0 event 1]" {
		t.Errorf("record: status %d, history %q; want the other write's status 7 and no mark", got.Status, notes(got.History))
	}
	if err := s.AppendHot(bg, k, meanwhile(8, deliveredMark(rec, now, "receipt", nil))); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, k); got.Status != 8 || fmt.Sprint(notes(got.History)) != "[event 0 event 1 receipt]" || got.Delivery != state.DeliveryDelivered {
		t.Errorf("record after AppendHot: status %d, history %q, delivery %q; want 8, the mark once, delivered", got.Status, notes(got.History), got.Delivery)
	}
	if es, err := s.List(bg, "esme/acme", 0, 10); err != nil || len(es) != 1 {
		t.Errorf("List = %d entries, %v; want 1", len(es), err)
	}
}

// The receipt intake (package dlr) uses these when the store has them:
// a change of their shape would silently give it two writes per receipt.
var _ interface {
	ByMessageIDHot(ctx context.Context, upstream, id string) (*state.Record, error)
	AppendHot(ctx context.Context, k state.Key, fn func(*state.Record) error) error
	EnqueueAppend(ctx context.Context, e *state.QueueEntry, k state.Key, fn func(*state.Record) error) (seq uint64, dup, appended bool, err error)
} = (*Store)(nil)

// The enqueues of one batch are one statement: of two for one dedup key,
// the second is the first's duplicate (its seq, no second entry); of two
// receipts of one record, each is queued and one record change is made
// (the other reported not appended, for its caller to make).
func TestOneBatchOfEnqueuesSettlesDuplicatesAndAppends(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, s, k, now, 2)
	// Both read the record before either is written.
	var apps []*recordAppend
	for _, note := range []string{"receipt 1", "receipt 2"} {
		next, added, wseq, err := s.hotChange(bg, k, deliveredMark(rec, now, note, nil))
		if err != nil || next == nil {
			t.Fatalf("hotChange = %v, %v", next, err)
		}
		apps = append(apps, newRecordAppend(next, added, wseq))
	}
	op := func(dedup string, app *recordAppend) *request {
		e := receiptEntry(now, dedup)
		o := &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now), app: app}
		if dedup != "" {
			o.dedup = col(dedup)
		}
		return &request{seqLock: true, enqueue: o}
	}
	first, second := op("r1", nil), op("r1", nil)
	plain := op("", nil)
	markA, markB := op("a", apps[0]), op("b", apps[1])
	batch := []*request{first, second, plain, markA, markB}
	if err := s.exec(batch); err != nil {
		t.Fatalf("exec = %v", err)
	}
	for i, r := range batch {
		if r.enqueue.err != nil || r.enqueue.seq == 0 {
			t.Fatalf("op %d: seq %d, err %v; want an answer", i, r.enqueue.seq, r.enqueue.err)
		}
	}
	if f, d := first.enqueue, second.enqueue; f.dup || !d.dup || d.seq != f.seq {
		t.Errorf("two enqueues of one key in a batch: (%d, dup %v), (%d, dup %v); want the second a duplicate of the first", f.seq, f.dup, d.seq, d.dup)
	}
	if a, b := markA.enqueue, markB.enqueue; a.dup || b.dup || a.appended == b.appended {
		t.Errorf("two receipts of one record in a batch: appended %v and %v, dup %v and %v; want both queued, one appended", a.appended, b.appended, a.dup, b.dup)
	}
	if es, err := s.List(bg, "esme/acme", 0, 10); err != nil || len(es) != 4 {
		t.Errorf("List = %d entries, %v; want 4 (r1, the one without key, a, b)", len(es), err)
	}
	if got := notes(mustGet(t, s, k).History); len(got) != 3 {
		t.Errorf("history %q; want the two events and one receipt's mark", got)
	}
}

// Lookups by message id made at once are grouped (with reads by key) into
// one round trip: each caller gets the record holding its own id, of two
// records holding one id the one written last, and ErrNotFound for an id
// no live record holds.
func TestConcurrentLookupsByMessageIDEachGetTheirRecord(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	const n = 200
	for i := range n {
		r := sentRecord(t0, fmt.Sprintf("k%d", i), "test-1/1", uint32(i))
		r.State, r.MessageID = state.Accepted, fmt.Sprintf("m%d", i)
		if i%4 == 3 {
			r.Expires = t0.Add(time.Second)
		}
		mustCreate(t, s, r)
	}
	// A later record holding m0 too (an SMSC reusing ids) takes it over.
	later := sentRecord(t0, "later", "test-1/1", 1)
	later.State, later.MessageID = state.Accepted, "m0"
	mustCreate(t, s, later)
	c.Advance(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n + 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("m%d", i)
			want := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
			if i == 0 {
				want.Key = "later"
			}
			got, err := s.ByMessageIDHot(bg, "smsc", id)
			switch {
			case i >= n || i%4 == 3:
				if !errors.Is(err, state.ErrNotFound) {
					errs <- fmt.Errorf("ByMessageIDHot(smsc, %s) = %+v, %v; want ErrNotFound", id, got, err)
				}
			case err != nil || got.Key != want || got.MessageID != id || got.History != nil:
				errs <- fmt.Errorf("ByMessageIDHot(smsc, %s) = %+v, %v; want %v without history", id, got, err, want)
			}
			if _, err := s.ByMessageIDHot(bg, "other", id); !errors.Is(err, state.ErrNotFound) {
				errs <- fmt.Errorf("ByMessageIDHot(other, %s) = %v; want ErrNotFound", id, err)
			}
		}()
		go func() { // reads by key in the same groups
			defer wg.Done()
			k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
			if got, err := s.Get(bg, k); (err == nil) != (i < n && i%4 != 3) || err == nil && got.Key != k {
				errs <- fmt.Errorf("Get(%v) = %+v, %v", k, got, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
