package dlr

import (
	"context"
	"sync"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// limitsQueue records the largest List of an account's queue.
type limitsQueue struct {
	state.Queue
	mu       sync.Mutex
	maxLimit int
}

func (q *limitsQueue) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	q.mu.Lock()
	q.maxLimit = max(q.maxLimit, limit)
	q.mu.Unlock()
	return q.Queue.List(ctx, queue, after, limit)
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
