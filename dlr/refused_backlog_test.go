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

// headsQueue counts the Lists of a queue from its head.
type headsQueue struct {
	state.Queue
	mu    sync.Mutex
	heads int
}

func (q *headsQueue) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	if after == 0 {
		q.mu.Lock()
		q.heads++
		q.mu.Unlock()
	}
	return q.Queue.List(ctx, queue, after, limit)
}

func (q *headsQueue) fromHead() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.heads
}

// With many entries held refused (their redelivery far off), a receipt
// queued after them, which the ESME takes, is sent at once, even after a
// List from the head. (From review: a version that read at most 256 held
// entries per List, to spare an ESME that refuses everything the cost of
// reading all of them again, left such a receipt waiting for the
// refusals' redelivery; it was withdrawn.)
func TestAReceiptQueuedBehindManyRefusedEntriesIsSentAtOnce(t *testing.T) {
	q := &headsQueue{}
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
