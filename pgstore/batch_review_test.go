package pgstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// Enqueues without dedup key, in one batch and in separate ones, are each
// a new entry (a nil dedup key is NULL, not an empty key).
func TestEnqueuesWithoutDedupKeyAreEachNew(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	seen := map[uint64]bool{}
	for i := range 3 {
		seq, dup, err := s.Enqueue(bg, receiptEntry(now, ""))
		if err != nil || dup || seen[seq] {
			t.Fatalf("Enqueue #%d = %d, %v, %v", i, seq, dup, err)
		}
		seen[seq] = true
	}
	var wg sync.WaitGroup
	var dups atomic.Int32
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, dup, err := s.Enqueue(bg, receiptEntry(now, "")); err != nil || dup {
				dups.Add(1)
			}
		}()
	}
	wg.Wait()
	if dups.Load() != 0 {
		t.Errorf("%d enqueues without key reported dup/err", dups.Load())
	}
	if es, _ := s.List(bg, "esme/acme", 0, 1000); len(es) != 53 {
		t.Errorf("List = %d entries; want 53", len(es))
	}
}

// Hostile bytes in queue, dedup key and record key.
func TestEnqueueAppendKeepsHostileBytes(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	k := state.Key{Account: "a\x00\xff", Key: "k\x00\xfe\x80", Segment: "\x00"}
	rec := sentRecord(now, "x", "test-1/1", 1)
	rec.Key = k
	rec.State, rec.MessageID, rec.Upstream = state.Accepted, "m\x00\xff", "up\x00\xc3"
	mustCreate(t, s, rec)
	got, err := s.ByMessageIDHot(bg, "up\x00\xc3", "m\x00\xff")
	if err != nil || got.Key != k {
		t.Fatalf("ByMessageIDHot = %+v, %v", got, err)
	}
	e := receiptEntry(now, "d\x00\xff\xfe")
	e.Queue = "q\x00\xff"
	seq, dup, appended, err := s.EnqueueAppend(bg, e, k, deliveredMark(rec, now, "receipt \x00\xff", nil))
	if err != nil || dup || !appended {
		t.Fatalf("EnqueueAppend = %d %v %v %v", seq, dup, appended, err)
	}
	seq2, dup, appended, err := s.EnqueueAppend(bg, e, k, deliveredMark(rec, now, "again", nil))
	if err != nil || !dup || appended || seq2 != seq {
		t.Fatalf("second EnqueueAppend = %d %v %v %v; want dup of %d", seq2, dup, appended, err, seq)
	}
	e2 := *e
	e2.DedupKey = "d\x00\xff" // a prefix of the first
	if _, dup, _, err := s.EnqueueAppend(bg, &e2, k, deliveredMark(rec, now, "third", nil)); err != nil || dup {
		t.Fatalf("prefix key: dup %v err %v", dup, err)
	}
	es, err := s.List(bg, "q\x00\xff", 0, 10)
	if err != nil || len(es) != 2 || es[0].DedupKey != e.DedupKey {
		t.Fatalf("List = %+v, %v", es, err)
	}
	if n := notes(mustGet(t, s, k).History); fmt.Sprint(n) != fmt.Sprint([]string{"created", "receipt \x00\xff", "third"}) {
		t.Errorf("history %q", n)
	}
}

// Two instances: one marks receipts with EnqueueAppend (falling back to
// AppendHot), the other updates the record concurrently (status and an
// event). No write is lost.
func TestEnqueueAppendRacingUpdatesOfAnotherInstanceLosesNoWrite(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b"})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, a, k, now, 1)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := intakeReceipt(a, k, rec, now, i); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := b.Update(bg, k, func(r *state.Record) error {
				r.Status++
				r.History = append(r.History, state.Event{At: now, Note: fmt.Sprint("update ", i)})
				return nil
			}); err != nil {
				t.Errorf("Update %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got := mustGet(t, a, k)
	count := map[string]int{}
	for _, e := range got.History {
		count[e.Note]++
	}
	for i := range n {
		if count[fmt.Sprint("receipt ", i)] != 1 || count[fmt.Sprint("update ", i)] != 1 {
			t.Errorf("event %d: receipt %d times, update %d times", i, count[fmt.Sprint("receipt ", i)], count[fmt.Sprint("update ", i)])
		}
	}
	if got.Status != n {
		t.Errorf("status %d; want %d (an update lost)", got.Status, n)
	}
}

// Two instances enqueue into one queue while a reader walks it with a
// cursor: no entry ever commits behind the cursor.
func TestNoEntryCommitsBehindTheCursorAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b"})
	now := time.Now()
	recs := make([]*state.Record, 4)
	for i := range recs {
		k := state.Key{Account: "acme", Key: fmt.Sprint("k", i)}
		recs[i] = acceptedWithHistory(t, a, k, now, 2)
	}
	const n = 400
	var wg sync.WaitGroup
	done := make(chan struct{})
	var enq sync.Map
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seq uint64
			var err error
			switch i % 3 {
			case 0:
				seq, _, err = s.Enqueue(bg, receiptEntry(now, ""))
			case 1:
				seq, _, err = s.Enqueue(bg, receiptEntry(now, fmt.Sprint("d", i)))
			default:
				r := recs[i%4]
				seq, _, _, err = s.EnqueueAppend(bg, receiptEntry(now, fmt.Sprint("d", i)), r.Key, deliveredMark(r, now, fmt.Sprint("rc", i), nil))
			}
			if err != nil {
				t.Error(err)
				return
			}
			enq.Store(seq, true)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	read := map[uint64]bool{}
	for _, e := range tailQueue(t, a, "esme/acme", 1000, done) {
		read[e.Seq] = true
	}
	missed := 0
	enq.Range(func(k, _ any) bool {
		if !read[k.(uint64)] {
			missed++
		}
		return true
	})
	if missed > 0 {
		t.Errorf("%d entries committed behind the cursor (never read)", missed)
	}
}

// An expired marker is replaced: the receipt is queued again and the
// record marked again; a live one makes a duplicate.
func TestEnqueueAppendAfterItsMarkerExpired(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	k := state.Key{Account: "acme", Key: "k1"}
	rec := sentRecord(t0, "k1", "test-1/1", 1)
	rec.Expires = t0.Add(10 * time.Hour)
	mustCreate(t, s, rec)
	e := receiptEntry(t0, "r1") // expires t0+1h
	seq1, dup, app, err := s.EnqueueAppend(bg, e, k, deliveredMark(rec, t0, "one", nil))
	if err != nil || dup || !app {
		t.Fatal(seq1, dup, app, err)
	}
	c.Advance(30 * time.Minute)
	if seq, dup, app, err := s.EnqueueAppend(bg, e, k, deliveredMark(rec, t0, "two", nil)); err != nil || !dup || app || seq != seq1 {
		t.Fatalf("live marker: %d %v %v %v", seq, dup, app, err)
	}
	c.Advance(90 * time.Minute) // t0 + 2h
	e2 := receiptEntry(c.Now(), "r1")
	seq3, dup, app, err := s.EnqueueAppend(bg, e2, k, deliveredMark(rec, t0, "three", nil))
	if err != nil || dup || !app || seq3 <= seq1 {
		t.Fatalf("expired marker: %d %v %v %v", seq3, dup, app, err)
	}
	if n := notes(mustGet(t, s, k).History); fmt.Sprint(n) != "[created one three]" {
		t.Errorf("history %q", n)
	}
}

// Ids that differ only in case or by a prefix, and one id at two upstreams,
// looked up at once: each caller gets its own record.
func TestGroupedLookupsFindTheRecordOfEachLookalikeID(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	type rk struct{ up, id, key string }
	recs := []rk{{"smsc", "m1", "a"}, {"smsc", "M1", "b"}, {"smsc", "m1\x00", "c"}, {"smsc2", "m1", "d"}, {"smsc\x00", "m1", "e"}, {"", "m1", "f"}}
	for i, r := range recs {
		rec := sentRecord(now, r.key, "test-1/1", uint32(i))
		rec.State, rec.Upstream, rec.MessageID = state.Accepted, r.up, r.id
		mustCreate(t, s, rec)
	}
	var wg sync.WaitGroup
	for range 20 {
		for _, r := range recs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.ByMessageIDHot(bg, r.up, r.id)
				if err != nil || got.Key.Key != r.key {
					t.Errorf("ByMessageIDHot(%q,%q) = %+v, %v; want %s", r.up, r.id, got, err, r.key)
				}
			}()
		}
	}
	wg.Wait()
}

// An Update's CAS and an EnqueueAppend of one record in one batch: the
// Update applies, the mark is not made over it (appended false).
func TestCASAndEnqueueAppendOfOneRecordInOneBatch(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	k := state.Key{Account: "acme", Key: "k1"}
	rec := acceptedWithHistory(t, s, k, now, 2)
	next, added, wseq, err := s.hotChange(bg, k, deliveredMark(rec, now, "mark", nil))
	if err != nil || next == nil {
		t.Fatal(err)
	}
	e := receiptEntry(now, "r1")
	eo := &enqueueOp{queue: col(e.Queue), dedup: col("r1"), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now), app: newRecordAppend(next, added, wseq)}
	cur := mustGet(t, s, k)
	upd := cur.Clone()
	upd.Status = 9
	upd.History = append(upd.History, state.Event{At: now, Note: "update"})
	h := state.StoredHistory(encodeEvents(cur.History), encodeEvents(upd.History), sameBytes)
	co := &casOp{args: recordArgs(upd, h), expect: wseq}
	if err := s.exec([]*request{{order: keyOrder(k), cas: co}, {seqLock: true, enqueue: eo, order: lockOrder{table: orderMarker}}}); err != nil {
		t.Fatal(err)
	}
	if !co.applied || eo.appended || eo.err != nil || eo.dup {
		t.Fatalf("cas applied %v, enqueue appended %v err %v dup %v", co.applied, eo.appended, eo.err, eo.dup)
	}
	got := mustGet(t, s, k)
	if got.Status != 9 || fmt.Sprint(notes(got.History)) != "[event 0 event 1 update]" {
		t.Errorf("record %d %q", got.Status, notes(got.History))
	}
}

// A batch whose statements all succeed on the server has committed, even
// when reading an answer fails here (a Create finding its key held by a
// record it cannot decode: damaged, or written by a newer version): that
// Create fails alone, and the batch is not run again request by request
// (the fresh Create of the same batch would find its own record and report
// "not created, existing", which its caller takes for a retry).
func TestACreateWhoseHolderCannotBeDecodedFailsAloneInItsBatch(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	s := openTest(t, Options{DSN: dsn})
	now := time.Now()
	insertUndecodable(t, dsn, s, "bad")
	bad := sentRecord(now, "bad", "test-1/1", 1)
	fresh := sentRecord(now, "fresh", "test-1/1", 2)
	ops := []*createOp{newCreateOp(bad, unixNano(now)), newCreateOp(fresh, unixNano(now))}
	reqs := []*request{{order: keyOrder(bad.Key), create: ops[0]}, {order: keyOrder(fresh.Key), create: ops[1]}}
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	s.runBatch(reqs)
	if reqs[0].err != nil || ops[0].err == nil {
		t.Errorf("Create over an undecodable holder: batch err %v, its own err %v; want its own error only", reqs[0].err, ops[0].err)
	}
	if reqs[1].err != nil || !ops[1].created {
		t.Errorf("fresh Create in a batch with an undecodable holder: err %v, created %v, existing %v; want created",
			reqs[1].err, ops[1].created, ops[1].existing != nil)
	}
}

// The same for the enqueues of such a batch: they succeed, once each (run
// again, the receipt committed with the batch would be reported a
// duplicate of itself — the intake then neither counts nor kicks it — and
// an entry without a dedup key would be queued twice); only the Create
// fails.
func TestEnqueuesInABatchWithAnUndecodableHolderSucceedOnce(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	s := openTest(t, Options{DSN: dsn})
	now := time.Now()
	insertUndecodable(t, dsn, s, "bad")
	bad := sentRecord(now, "bad", "test-1/1", 1)
	cop := newCreateOp(bad, unixNano(now))
	enq := func(dedup string) *enqueueOp {
		e := receiptEntry(now, dedup)
		o := &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now)}
		if dedup != "" {
			o.dedup = col(dedup)
		}
		return o
	}
	withKey, noKey := enq("r1"), enq("")
	reqs := []*request{
		{order: keyOrder(bad.Key), create: cop},
		{seqLock: true, enqueue: withKey, order: lockOrder{table: orderMarker, a: withKey.queue, b: withKey.dedup}},
		{seqLock: true, enqueue: noKey, order: lockOrder{table: orderEntry, a: noKey.queue}},
	}
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	s.runBatch(reqs)
	if reqs[0].err != nil || cop.err == nil || reqs[1].err != nil || reqs[2].err != nil || withKey.err != nil || noKey.err != nil {
		t.Errorf("errors: batch %v / %v / %v, Create's own %v, enqueues' own %v / %v; want the Create's own only",
			reqs[0].err, reqs[1].err, reqs[2].err, cop.err, withKey.err, noKey.err)
	}
	if withKey.dup {
		t.Errorf("the first enqueue of key r1 was reported a duplicate (of itself, seq %d)", withKey.seq)
	}
	if es, err := s.List(bg, "esme/acme", 0, 10); err != nil || len(es) != 2 {
		t.Errorf("List = %d entries, %v; want 2 (one per enqueue)", len(es), err)
	}
}

// A batch that rolls back notifies no one; one that commits does.
// Notifications arrive in commit order, so once the later successful
// enqueue's is seen, the failed one's would have been seen before it.
func TestARolledBackEnqueueNotifiesNoOne(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	s := openTest(t, Options{DSN: dsn})
	other := openTest(t, Options{DSN: dsn, Schema: s.opts.Schema, InstanceID: "b"})
	got := make(chan string, 1024)
	other.Subscribe(func(q string) { got <- q })
	now := time.Now()
	wait := func(queue string) []string {
		var before []string
		timeout := time.After(10 * time.Second)
		for {
			select {
			case q := <-got:
				if q == queue {
					return before
				}
				before = append(before, q)
			case <-timeout:
				t.Fatalf("no notification of %q", queue)
			}
		}
	}
	// Listening: enqueue until one is seen.
	for i := 0; ; i++ {
		e := receiptEntry(now, "")
		e.Queue = "warm"
		if _, _, err := s.Enqueue(bg, e); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	schema := s.opts.Schema
	exec(t, dsn, `CREATE FUNCTION `+schema+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test'; END $$`)
	exec(t, dsn, `CREATE TRIGGER refuse BEFORE INSERT ON `+schema+`.queue_entries FOR EACH ROW WHEN (NEW.queue = '\x6661696c') EXECUTE FUNCTION `+schema+`.refuse()`)
	e := receiptEntry(now, "x")
	e.Queue = "fail"
	if _, _, err := s.Enqueue(bg, e); err == nil {
		t.Fatal("enqueue into the refusing queue succeeded")
	}
	e = receiptEntry(now, "y")
	e.Queue = "ok"
	if _, _, err := s.Enqueue(bg, e); err != nil {
		t.Fatal(err)
	}
	for _, q := range wait("ok") {
		if q == "fail" {
			t.Errorf("notified of a rolled-back enqueue")
		}
	}
}

// insertUndecodable puts under (acme, key) a live record whose body no
// version of the codec decodes.
func insertUndecodable(t *testing.T, dsn string, s *Store, key string) {
	t.Helper()
	exec(t, dsn, `INSERT INTO `+s.opts.Schema+`.records (account, key, segment, state, owner_instance, expires_ns, upstream, seq, body, history, wseq)
		VALUES ('acme', '`+key+`', '', 'sent', 'x', 9223372036854775807, 'smsc', 0, '\x09', '{}', 0)`)
}
