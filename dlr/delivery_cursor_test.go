package dlr

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// listingQueue is the store's queue recording where every List of an
// account queue started, and hiding the entries hide names from List.
type listingQueue struct {
	state.Queue
	mu     sync.Mutex
	afters []uint64
	hide   map[uint64]bool
}

func (q *listingQueue) wrap(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q }

func (q *listingQueue) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	es, err := q.Queue.List(ctx, queue, after, limit)
	q.mu.Lock()
	defer q.mu.Unlock()
	if queue != accountQueue("shop") {
		return es, err
	}
	q.afters = append(q.afters, after)
	return slices.DeleteFunc(es, func(e *state.QueueEntry) bool { return q.hide[e.Seq] }), err
}

func (q *listingQueue) fromHead() (heads, all int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, a := range q.afters {
		if a == 0 {
			heads++
		}
	}
	return heads, len(q.afters)
}

func (q *listingQueue) reveal() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.hide = nil
}

// A dispatcher reads its queue on from the last entry it sent, not from
// the head: the acknowledged entries before it (deletions the store still
// walks) are not read again by every pump. It reads from the head only
// now and then (once a second), as a safety net.
func TestDispatcherReadsItsQueueFromWhereItStopped(t *testing.T) {
	lq := &listingQueue{}
	e := newEnv(t, lq.wrap, func(c *Config) { c.DeliverWindow = 2 })
	want := queueReceipts(t, e, 60)
	start := time.Now()
	rx := &fakeRx{id: "s"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "all acknowledged", func() bool { return e.svc.Count(DelAcked) == 60 })
	if got := rx.received(); !slices.Equal(got, want) {
		t.Errorf("session got %v, want the queue order %v", got, want)
	}
	heads, all := lq.fromHead()
	// 60 entries two at a time: at least 30 Lists. From the head: the
	// first, and one per second since.
	if most := 2 + int(time.Since(start)/fullListEvery); all < 30 || heads > most {
		t.Errorf("%d of %d Lists read the queue from its head; want at most %d", heads, all, most)
	}
}

// An entry the ESME did not answer goes back to pending behind the
// dispatcher's cursor: it is the next one sent, before the newer entries.
func TestUnansweredEntryIsSentAgainBeforeNewerOnes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DeliverWindow = 1 })
	want := queueReceipts(t, e, 6)
	errNoAnswer := errors.New("no answer")
	rx := &fakeRx{id: "s", answer: func(n int) (smpp.Status, error) {
		if n == 3 {
			return 0, errNoAnswer
		}
		return smpp.StatusOK, nil
	}}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "all acknowledged", queueEmpty(e))
	got := rx.received()
	wantSent := slices.Concat(want[:3], want[2:])
	if !slices.Equal(got, wantSent) {
		t.Errorf("session got %v, want %v (the unanswered third again, then the rest)", got, wantSent)
	}
}

// An entry that becomes visible only after the dispatcher's cursor has
// passed its seq (a store shared by several processes commits out of
// order) is delivered all the same, by the next read from the head.
func TestEntryVisibleLateBehindTheCursorIsDelivered(t *testing.T) {
	clock := newClock()
	lq := &listingQueue{}
	e := newEnv(t, lq.wrap, func(c *Config) { c.Now = clock.Now })
	want := queueReceipts(t, e, 5)
	es := queued(t, e.st, accountQueue("shop"))
	lq.mu.Lock()
	lq.hide = map[uint64]bool{es[1].Seq: true}
	lq.mu.Unlock()
	rx := &fakeRx{id: "s"}
	e.rcv.bind("shop", rx)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "the visible ones acknowledged", func() bool { return e.svc.Count(DelAcked) == 4 })
	lq.reveal()
	clock.Advance(fullListEvery)
	e.svc.kick("shop")
	waitFor(t, "the late one acknowledged", queueEmpty(e))
	got := rx.received()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("session got %v, want each of %v once", got, want)
	}
}

// An account's dlr_window (Account.Window) bounds the deliver_sm awaiting
// their response on each of its sessions, over Config.DeliverWindow.
func TestAccountWindowBoundsDeliverSMAwaitingAnswer(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.DeliverWindow = 10
		a := c.Accounts["shop"]
		a.Window = 3
		c.Accounts["shop"] = a
	})
	queueReceipts(t, e, 30)
	rx := &fakeRx{id: "s", respDelay: func(int) time.Duration { return 10 * time.Millisecond }}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "all acknowledged", queueEmpty(e))
	if p := rx.peak.Load(); p < 2 || p > 3 {
		t.Errorf("at most %d deliver_sm awaited their answer at once, want 2 to 3 (the account's window)", p)
	}
}
