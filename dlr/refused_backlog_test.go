package dlr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
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
	rx := refusingFirst(refused)
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "every entry refused once", func() bool { return rx.calls.Load() >= refused })
	heads := q.fromHead()
	waitFor(t, "a List from the head since", func() bool { return q.fromHead() > heads })
	queueNew(t, e, refused)
	waitFor(t, "the new receipt delivered", func() bool { return e.svc.Count(DelAcked) == 1 })
}

// slowQueue is a queue whose every List takes 100 ms of the service's
// clock (a loaded shared store).
type slowQueue struct {
	state.Queue
	clock *testkit.Clock
}

func (q *slowQueue) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	q.clock.Advance(100 * time.Millisecond)
	return q.Queue.List(ctx, queue, after, limit)
}

// slowEnv is an env whose store takes 100 ms of its clock per List, with a
// deliver window of window and an hour's redelivery for shop.
func slowEnv(t *testing.T, window int) (*env, *testkit.Clock) {
	t.Helper()
	clock := newClock()
	q := &slowQueue{clock: clock}
	e := newEnv(t, func(c *Config) {
		q.Queue = c.Store.(state.Queue)
		c.Queue, c.Now = q, clock.Now
		c.DeliverWindow = window
		a := c.Accounts["shop"]
		a.Redelivery = time.Hour
		c.Accounts["shop"] = a
	})
	return e, clock
}

// With many entries held refused and a store slow to list, a receipt
// queued after them, which the ESME takes, is still sent at once. (From
// review of a version that read the refused entries a page at a time: a
// pass that took longer than a second was started again and again from
// the head, and the new receipt never sent. That version was withdrawn;
// this test stays for the next attempt.)
func TestANewReceiptIsSentWhileASlowStorePagesThroughRefusedEntries(t *testing.T) {
	e, clock := slowEnv(t, 10)
	const refused = 1000
	queueReceipts(t, e, refused)
	rx := refusingFirst(refused)
	e.rcv.bind("shop", rx)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "every entry refused once", func() bool { return rx.calls.Load() >= refused })
	queueNew(t, e, refused)
	waitFor(t, "the new receipt delivered", func() bool { return e.svc.Count(DelAcked) == 1 })
}

// Entries that went back to pending below the cursor while many refused
// entries are held (their session ended unanswered) are sent again before
// newer entries, as ever: an ENROUTE must not follow its DELIVRD. (From
// review of a withdrawn version that paged through the refused entries and
// listed past the cursor beside the pass: the newer entries went first.)
func TestEntriesBackToPendingAreSentBeforeNewerOnesWhilePaging(t *testing.T) {
	e, clock := slowEnv(t, 2)
	const refused = 300
	queueReceipts(t, e, refused)
	errNoAnswer := errors.New("no answer")
	s1 := &fakeRx{id: "s1", done: make(chan struct{}), answer: func(n int) (smpp.Status, error) {
		if n <= refused {
			return smpp.StatusThrottled, nil
		}
		return 0, errNoAnswer // the next two stay unanswered
	}}
	e.rcv.bind("shop", s1)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "every entry refused once", func() bool { return s1.calls.Load() >= refused })
	var want []string
	for i := refused; i < refused+4; i++ {
		e.accepted(t, "shop", fmt.Sprint("knew", i), fmt.Sprintf("%x", 100+i))
		if st := e.deliver(t, dlrFrame(fmt.Sprint(100+i), "DELIVRD")); st != smpp.StatusOK {
			t.Fatalf("OnDeliver = %v, want 0", st)
		}
		want = append(want, fmt.Sprintf("%x", 100+i))
	}
	waitFor(t, "two new entries sent on s1", func() bool { return s1.calls.Load() >= refused+2 })
	close(s1.done) // the two unanswered go back to pending
	d := e.svc.accounts["shop"]
	waitFor(t, "the two back to pending", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.perSess) == 0
	})
	s2 := &fakeRx{id: "s2", bound: clock.Now()}
	e.rcv.bind("shop", s2)
	clock.Advance(time.Second)
	e.svc.kick("shop")
	waitFor(t, "the four new entries sent on s2", func() bool { return len(s2.received()) == 4 })
	if got := s2.received(); !slices.Equal(got, want) {
		t.Errorf("s2 got %v, want %v (the two sent again first)", got, want)
	}
}

// refusingFirst is a session that refuses the first n deliver_sm (0x58)
// and takes the others.
func refusingFirst(n int) *fakeRx {
	return &fakeRx{id: "s1", answer: func(call int) (smpp.Status, error) {
		if call <= n {
			return smpp.StatusThrottled, nil
		}
		return smpp.StatusOK, nil
	}}
}

// queueNew stores record i of shop and queues its receipt.
func queueNew(t *testing.T, e *env, i int) {
	t.Helper()
	e.accepted(t, "shop", fmt.Sprint("knew", i), fmt.Sprintf("%x", 100+i))
	if st := e.deliver(t, dlrFrame(fmt.Sprint(100+i), "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v, want 0", st)
	}
}
