package pgstore

import (
	"testing"
	"time"
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
