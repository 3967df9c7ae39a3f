package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A batch whose statements all succeeded on the server commits at its
// Sync even when reading one of its answers fails here (pgx's Close runs
// no further callback but still reads up to the Sync): it is never run
// again request by request. Run again, the fresh Create would find its
// own record ("not created, existing") and the entry without a dedup key
// would be queued a second time.
func TestABatchIsNotRunAgainWhenAnAnswerFailsHereAfterItCommitted(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	fresh := sentRecord(now, "fresh", "test-1/1", 1)
	cop := newCreateOp(fresh, unixNano(now))
	e := receiptEntry(now, "")
	noKey := &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now)}
	failed := errors.New("reading the answer failed here")
	failing := func(seqLock bool) *request {
		return &request{seqLock: seqLock, order: lockOrder{table: orderEntry, a: []byte("zz")}, queue: func(b *pgx.Batch) {
			b.Queue(`SELECT 1`).Query(func(rows pgx.Rows) error {
				rows.Close()
				return failed
			})
		}}
	}
	// The enqueues of a batch and its other writes are two transactions:
	// an answer fails in each.
	reqs := []*request{
		{order: keyOrder(fresh.Key), create: cop},
		{seqLock: true, enqueue: noKey, order: lockOrder{table: orderEntry, a: noKey.queue}},
		failing(false),
		failing(true),
	}
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	s.runBatch(reqs)
	for i, r := range reqs {
		if !errors.Is(r.err, failed) {
			t.Errorf("request %d: err %v; want the batch's error (its outcome is not known to the caller)", i, r.err)
		}
	}
	if cop.existing != nil {
		t.Errorf("the Create was run again: it found its own record")
	}
	if es, err := s.List(bg, e.Queue, 0, 10); err != nil || len(es) != 1 {
		t.Errorf("List = %d entries, %v; want 1 (the batch committed once)", len(es), err)
	}
	if _, err := s.Get(bg, fresh.Key); err != nil {
		t.Errorf("Get(fresh) = %v; the batch committed", err)
	}
}
