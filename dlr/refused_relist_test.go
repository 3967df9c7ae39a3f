package dlr

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// limitsQueue records the largest List of an account's queue, and counts
// the Lists from its head.
type limitsQueue struct {
	state.Queue
	mu       sync.Mutex
	maxLimit int
	heads    int
}

func (q *limitsQueue) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	q.mu.Lock()
	q.maxLimit = max(q.maxLimit, limit)
	if after == 0 {
		q.heads++
	}
	q.mu.Unlock()
	return q.Queue.List(ctx, queue, after, limit)
}

func (q *limitsQueue) fromHead() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.heads
}

func (q *limitsQueue) largest() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.maxLimit
}

// An ESME that refuses every deliver_sm (a backlog it cannot take yet)
// leaves its dispatcher holding every entry it refused until its
// redelivery is due. Each refusal that comes due made the next List read
// again every entry held, a few thousand per deliver_sm sent (from a
// review): a List now reads at most a bounded part beyond the free window
// slots, and the pumps after it go on from where it stopped.
func TestADispatcherWhoseESMERefusesEverythingReadsABoundedPartOfItsQueuePerList(t *testing.T) {
	q := &limitsQueue{}
	e := newEnv(t, func(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q })
	const queued = 2000
	queueReceipts(t, e, queued)
	rx := &fakeRx{id: "s1", answer: func(int) (smpp.Status, error) { return smpp.StatusThrottled, nil }}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	// Every entry refused once, and refusals come due (redelivery 200ms)
	// and sent again while most are still held.
	waitFor(t, "every entry refused and some sent again", func() bool { return rx.calls.Load() >= 2*queued })
	if most := DefaultDeliverWindow + relistMost; q.largest() > most {
		t.Errorf("largest List of the queue: %d entries; want at most %d (the window and %d beyond it)", q.largest(), most, relistMost)
	}
}

// With more entries held refused than one List reads beyond the window
// (their redelivery far off), a receipt queued after them, which the ESME
// takes, is sent at once: a List that found nothing to send among the
// held entries goes on at once from where it stopped, rather than at the
// next tick, when the List from the head started over (from review: it
// waited for the refusals' redelivery).
func TestAReceiptQueuedBehindManyRefusedEntriesIsSentAtOnce(t *testing.T) {
	q := &limitsQueue{}
	e := newEnv(t, func(c *Config) {
		q.Queue = c.Store.(state.Queue)
		c.Queue = q
		a := c.Accounts["shop"]
		a.Redelivery = time.Hour
		c.Accounts["shop"] = a
	})
	const refused = 1000
	queueReceipts(t, e, refused)
	rx := &fakeRx{id: "s1", answer: func(n int) (smpp.Status, error) {
		if n <= refused {
			return smpp.StatusThrottled, nil
		}
		return smpp.StatusOK, nil
	}}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "every entry refused once", func() bool { return rx.calls.Load() >= refused })
	heads := q.fromHead()
	waitFor(t, "a List from the head since", func() bool { return q.fromHead() > heads })
	e.accepted(t, "shop", "knew", fmt.Sprintf("%x", 100+refused))
	if st := e.deliver(t, dlrFrame(fmt.Sprint(100+refused), "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v, want 0", st)
	}
	waitFor(t, "the new receipt delivered", func() bool { return e.svc.Count(DelAcked) == 1 })
}
