package dlr

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// pairingQueue is the store's queue holding each Enqueue into shop's
// queue until another one is in progress too (or a second has passed),
// and recording the most in progress at once.
type pairingQueue struct {
	state.Queue
	mu       sync.Mutex
	inflight int
	peak     int
	paired   chan struct{} // closed once two were in progress at once
}

func (q *pairingQueue) wrap(c *Config) {
	q.Queue, q.paired = c.Store.(state.Queue), make(chan struct{})
	c.Queue = q
}

func (q *pairingQueue) Enqueue(ctx context.Context, e *state.QueueEntry) (uint64, bool, error) {
	if e.Queue != accountQueue("shop") {
		return q.Queue.Enqueue(ctx, e)
	}
	q.mu.Lock()
	q.inflight++
	if q.inflight == 2 && q.peak < 2 {
		close(q.paired) // the first time only
	}
	q.peak = max(q.peak, q.inflight)
	q.mu.Unlock()
	t := time.NewTimer(time.Second)
	select {
	case <-q.paired:
	case <-t.C:
	}
	t.Stop()
	defer func() { q.mu.Lock(); q.inflight--; q.mu.Unlock() }()
	return q.Queue.Enqueue(ctx, e)
}

// keepReceipts hands shop's receipts of ids 100+i, i in [0, n), with each
// stat in turn, to the service before their records exist (they are
// kept), then stores the records accepted and wakes the reconciler.
func keepReceipts(t *testing.T, e *env, n int, stats ...string) {
	t.Helper()
	for i := range n {
		for _, stat := range stats {
			if st := e.deliver(t, dlrFrame(fmt.Sprint(100+i), stat)); st != 0 {
				t.Fatal(st)
			}
		}
	}
	if got := e.svc.Count(OutUnmatched); got != uint64(n*len(stats)) {
		t.Fatalf("%d receipts kept, want %d", got, n*len(stats))
	}
	for i := range n {
		e.accepted(t, "shop", fmt.Sprint("k", i), fmt.Sprintf("%x", 100+i))
	}
	e.svc.rec.kick()
}

// Kept receipts whose records have come are matched several at once, not
// one durable write after the other.
func TestKeptReceiptsAreMatchedSeveralAtOnce(t *testing.T) {
	pq := &pairingQueue{}
	e := newEnv(t, pq.wrap)
	keepReceipts(t, e, 10, "DELIVRD")
	waitFor(t, "all kept receipts matched", func() bool { return e.svc.Count(OutMatchedLater) == 10 })
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if pq.peak < 2 {
		t.Errorf("at most %d kept receipts were queued for the account at once, want several", pq.peak)
	}
	if es := queued(t, e.st, accountQueue("shop")); len(es) != 10 {
		t.Errorf("%d receipts queued for shop, want 10", len(es))
	}
}

// The kept receipts of one message are queued for the account in the
// order they came: an intermediate receipt before the final one.
func TestKeptReceiptsOfOneMessageKeepTheirOrder(t *testing.T) {
	e := newEnv(t)
	keepReceipts(t, e, 40, "ENROUTE", "DELIVRD")
	waitFor(t, "all kept receipts matched", func() bool { return e.svc.Count(OutMatchedLater) == 80 })
	es, err := e.st.List(bg, accountQueue("shop"), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]string{}
	for _, q := range es {
		if _, ok := first[q.MessageID]; !ok {
			first[q.MessageID] = q.Stat
		}
	}
	if len(es) != 80 || len(first) != 40 {
		t.Fatalf("%d receipts of %d messages queued, want 80 of 40", len(es), len(first))
	}
	for id, stat := range first {
		if stat != "ENROUTE" {
			t.Errorf("message %s: %s queued first, want ENROUTE", id, stat)
		}
	}
}

// A receipt kept while its submit_sm_resp may still be on its way (kept
// for less than the upstream's response_timeout + 1s) is looked at again
// at least every retryYoung, however many tries found nothing: once its
// record is accepted it is matched within that, not after a back-off that
// grew meanwhile. Later the back-off grows again.
func TestYoungKeptReceiptIsTriedOftenUntilItsRecordComes(t *testing.T) {
	clock := newClock()
	e := newEnv(t, func(c *Config) {
		c.Now = clock.Now
		c.Upstreams = map[string]Upstream{"smsc": {ResponseTimeout: 10 * time.Second}}
	})
	if st := e.deliver(t, dlrFrame("100", "DELIVRD")); st != 0 {
		t.Fatal(st)
	}
	e.waitTried(t, clock.Now())
	// Tries that find nothing for 3.25s: by the back-off alone the last
	// one (at 3.1s) would be followed by the next at 6.3s.
	for range 13 {
		clock.Advance(250 * time.Millisecond)
		e.svc.rec.kick()
		e.waitTried(t, clock.Now())
	}
	e.accepted(t, "shop", "k0", "64")
	clock.Advance(retryYoung)
	e.svc.rec.kick()
	waitFor(t, "matched", func() bool { return e.svc.Count(OutMatchedLater) == 1 })

	// Past the settle delay a receipt that matches nothing waits longer.
	if st := e.deliver(t, dlrFrame("101", "DELIVRD")); st != 0 {
		t.Fatal(st)
	}
	e.waitTried(t, clock.Now())
	for range 6 {
		clock.Advance(2 * time.Second)
		e.svc.rec.kick()
		e.waitTried(t, clock.Now())
	}
	c := e.svc.rec
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.next {
		if wait := r.at.Sub(clock.Now()); wait <= retryYoung {
			t.Errorf("a receipt kept 12s (settle delay 11s) is tried again in %v; want the grown back-off", wait)
		}
	}
}
