package pgstore

import (
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// The queue sequence lock serialises the enqueues of every instance; the
// record writes gathered in the same batch as an enqueue do not wait for
// it: while another session holds the lock, a batch's Create commits and
// its Enqueue waits, then commits once the lock is free.
func TestRecordWritesOfABatchDoNotWaitForTheQueueLock(t *testing.T) {
	s := openTest(t, Options{})
	holder, err := s.pool.Acquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(bg, "SELECT pg_advisory_lock($1)", int64(seqLockKey)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	create := &request{order: keyOrder(sentRecord(now, "k1", "t-1/1", 1).Key), create: newCreateOp(sentRecord(now, "k1", "t-1/1", 1), unixNano(now)), done: make(chan struct{})}
	e := receiptEntry(now, "")
	enq := &request{seqLock: true, order: lockOrder{table: orderEntry, a: col(e.Queue)}, done: make(chan struct{}),
		enqueue: &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now)}}
	go s.runBatch([]*request{create, enq})
	select {
	case <-create.done:
		if create.err != nil || !create.create.created {
			t.Fatalf("create: created %v, err %v", create.create.created, create.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch's create waited for the queue lock another session holds")
	}
	select {
	case <-enq.done:
		t.Fatal("the enqueue committed while another session held the queue lock")
	default:
	}
	if _, err := holder.Exec(bg, "SELECT pg_advisory_unlock($1)", int64(seqLockKey)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-enq.done:
		if enq.err != nil || enq.enqueue.seq == 0 {
			t.Fatalf("enqueue: seq %d, err %v", enq.enqueue.seq, enq.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the enqueue did not commit once the queue lock was free")
	}
}

// A batch's writes of a record that one of its enqueues marks go in the
// enqueues' transaction, not beside it: two transactions of one batch
// locking the same rows in different orders could wait for each other in
// a cycle. The batch's other writes still go beside it.
func TestWritesOfARecordABatchMarksShareTheMarksTransaction(t *testing.T) {
	s := openTest(t, Options{})
	now := time.Now()
	k1, k2, k3 := state.Key{Account: "acme", Key: "k1"}, state.Key{Account: "acme", Key: "k2"}, state.Key{Account: "acme", Key: "k3"}
	var reqs []*request
	var marks, sameRecord []*request
	for i, k := range []state.Key{k1, k2} {
		rec := acceptedWithHistory(t, s, k, now, 2)
		next, added, wseq, err := s.hotChange(bg, k, deliveredMark(rec, now, "mark", nil))
		if err != nil || next == nil {
			t.Fatalf("hotChange = %v, %v", next, err)
		}
		dedup := []string{"b", "a"}[i] // k2's entry sorts first: the marks lock k2, then k1
		e := receiptEntry(now, dedup)
		eo := &enqueueOp{queue: col(e.Queue), dedup: col(dedup), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now), app: newRecordAppend(next, added, wseq)}
		upd := mustGet(t, s, k)
		upd.Status = 9
		cas := &request{order: keyOrder(k), cas: &casOp{args: recordArgs(upd, encodeEvents(upd.History)), expect: wseq}}
		mark := &request{seqLock: true, enqueue: eo, order: lockOrder{table: orderMarker, a: eo.queue, b: eo.dedup}}
		reqs = append(reqs, cas, mark)
		marks, sameRecord = append(marks, mark), append(sameRecord, cas)
	}
	other := &request{order: keyOrder(k3), create: newCreateOp(sentRecord(now, "k3", "t-1/1", 3), unixNano(now))}
	reqs = append(reqs, other)
	locked, free := splitBatch(reqs)
	for _, r := range append(marks, sameRecord...) {
		if !slices.Contains(locked, r) {
			t.Errorf("%s: a write of a record the batch marks is not in the marks' transaction", r.order.b)
		}
	}
	if !slices.Equal(free, []*request{other}) {
		t.Errorf("the create of an unmarked record is not beside the marks' transaction (%d free requests)", len(free))
	}
	// And the batch commits: the marks and the writes of their records in
	// one transaction, one after the other.
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	s.runBatch(reqs)
	for _, r := range reqs {
		if r.err != nil {
			t.Errorf("%s: %v", r.order.b, r.err)
		}
	}
	if !other.create.created {
		t.Error("the create of k3 was not made")
	}
}
