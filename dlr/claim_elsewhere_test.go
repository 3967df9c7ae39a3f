package dlr

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// sharedQueue is the store's queue as several processes share it
// (state.Claimer): the entries in elsewhere are being delivered by another
// process, so Claim refuses them and ListClaimable leaves them out; tried
// counts the claims of those entries asked all the same, fromHead the
// lists from the head since the last set. Its Acks fail while failAck is
// set.
type sharedQueue struct {
	state.Queue
	failAck   atomic.Bool
	mu        sync.Mutex
	elsewhere map[uint64]bool
	tried     int
	fromHead  int
	claims    []claimCall
}

// claimCall is one Claim asked of a sharedQueue.
type claimCall struct {
	seqs  []uint64
	until time.Time
}

func (q *sharedQueue) wrap(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q }

func (q *sharedQueue) Ack(ctx context.Context, queue string, seq uint64) error {
	if q.failAck.Load() {
		return errors.New("disk full")
	}
	return q.Queue.Ack(ctx, queue, seq)
}

func (q *sharedQueue) Claim(ctx context.Context, queue string, seqs []uint64, owner string, until time.Time) ([]uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.claims = append(q.claims, claimCall{slices.Clone(seqs), until})
	var got []uint64
	for _, seq := range seqs {
		if q.elsewhere[seq] {
			q.tried++
			continue
		}
		got = append(got, seq)
	}
	return got, nil
}

func (q *sharedQueue) ListClaimable(ctx context.Context, queue string, after uint64, limit int, owner string) ([]*state.QueueEntry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if after == 0 {
		q.fromHead++
	}
	es, err := q.Queue.List(ctx, queue, after, limit+len(q.elsewhere))
	es = slices.DeleteFunc(es, func(e *state.QueueEntry) bool { return q.elsewhere[e.Seq] })
	return es[:min(len(es), limit)], err
}

// set says which entries another process holds from now on.
func (q *sharedQueue) set(elsewhere map[uint64]bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.elsewhere, q.fromHead = elsewhere, 0
}

func (q *sharedQueue) listedFromHead() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.fromHead
}

// sharedSetup queues n receipts for shop on a shared queue (its clock
// injected) and returns their ids in queue order and their entries.
func sharedSetup(t *testing.T, n int) (*env, *sharedQueue, *testkit.Clock, []string, []*state.QueueEntry) {
	t.Helper()
	clock := newClock()
	sq := &sharedQueue{}
	e := newEnv(t, sq.wrap, func(c *Config) { c.Now = clock.Now })
	want := queueReceipts(t, e, n)
	es := queued(t, e.st, accountQueue("shop"))
	if len(es) != n {
		t.Fatalf("%d entries queued, want %d", len(es), n)
	}
	return e, sq, clock, want, es
}

// heldElsewhere queues 4 receipts for shop, of which another instance is
// delivering the 2nd and 3rd, binds a session and waits until it got the
// two others.
func heldElsewhere(t *testing.T) (*env, *sharedQueue, *testkit.Clock, *fakeRx, []string) {
	t.Helper()
	e, sq, clock, want, es := sharedSetup(t, 4)
	sq.set(map[uint64]bool{es[1].Seq: true, es[2].Seq: true})
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "the two entries no other instance holds delivered", func() bool { return len(rx.received()) == 2 })
	return e, sq, clock, rx, want
}

// On a queue shared by several instances, a dispatcher delivers what no
// other instance is delivering and does not ask again and again to claim
// the entries another instance holds: each such claim is a write to the
// shared store that cannot succeed.
func TestADispatcherDoesNotTryToClaimWhatAnotherInstanceIsDelivering(t *testing.T) {
	_, sq, _, rx, want := heldElsewhere(t)
	if got := rx.received(); !slices.Equal(got, []string{want[0], want[3]}) {
		t.Errorf("delivered %v, want %v", got, []string{want[0], want[3]})
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if sq.tried != 0 {
		t.Errorf("%d claims of entries another instance is delivering", sq.tried)
	}
}

// The entries another instance held are delivered once its claims run out
// (it died), though this instance's cursor passed them meanwhile: its
// next read from the head finds them.
func TestEntriesAnotherInstanceHeldAreDeliveredOnceItsClaimRunsOut(t *testing.T) {
	e, sq, clock, rx, want := heldElsewhere(t)
	sq.set(nil) // the other instance died, its claims ran out
	clock.Advance(fullListEvery)
	e.svc.kick("shop")
	waitFor(t, "queue empty", queueEmpty(e))
	got := rx.received()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("delivered %v, want each of %v once", got, want)
	}
}

// An entry the ESME acknowledged whose Ack the store refuses is never sent
// again by this instance, even when, its claim having run out, another
// instance held it for a while (so this instance's reads left it out) and
// then died.
func TestAnAckPendingEntryIsNotSentAgainAfterAnotherInstanceHeldIt(t *testing.T) {
	e, sq, clock, _, es := sharedSetup(t, 1)
	seq := es[0].Seq
	sq.failAck.Store(true)
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "the entry acknowledged, its Ack refused", func() bool {
		e.svc.mu.Lock()
		d := e.svc.accounts["shop"]
		e.svc.mu.Unlock()
		if d == nil {
			return false
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		en := d.entries[seq]
		return en != nil && en.state == entryAckPending
	})
	sq.set(map[uint64]bool{seq: true}) // another instance claimed it
	clock.Advance(fullListEvery)
	e.svc.kick("shop")
	waitFor(t, "a read from the head", func() bool { return sq.listedFromHead() >= 1 })
	sq.set(nil) // that instance died; the store takes Acks again
	sq.failAck.Store(false)
	clock.Advance(time.Minute) // the next read from the head, and the Ack's next try, are due
	e.svc.kick("shop")
	waitFor(t, "queue empty", queueEmpty(e))
	if n := len(rx.received()); n != 1 {
		t.Errorf("acknowledged once, sent %d times by this instance; want 1", n)
	}
}

// A pump whose sends take a while to start (the session waits for room
// for the first) claims again what it has not started yet, once half of
// dlr_redelivery has passed, so that no claim runs out while its
// deliver_sm may still be waiting for its answer: another instance would
// then deliver it at the same time.
func TestAPumpClaimsAgainWhatItHasNotStartedWhenItsSendsTakeAWhile(t *testing.T) {
	e, sq, clock, _, es := sharedSetup(t, 3)
	// The first deliver_sm waits for room until its send gives up
	// (dlr_redelivery); the others go at once.
	rx := &fakeRx{id: "s1", queueDelay: func(call int) time.Duration {
		if call == 1 {
			return time.Hour
		}
		return 0
	}}
	e.rcv.bind("shop", rx)
	clock.Advance(time.Second) // past BindSettle
	e.svc.kick("shop")
	waitFor(t, "the first deliver_sm waiting for room", func() bool { return rx.calls.Load() == 1 })
	redelivery := e.svc.account("shop").Redelivery
	clock.Advance(redelivery/2 + time.Millisecond)
	reclaimAt := clock.Now()
	claims := func() []claimCall {
		sq.mu.Lock()
		defer sq.mu.Unlock()
		return slices.Clone(sq.claims)
	}
	waitFor(t, "a second claim", func() bool { return len(claims()) >= 2 })
	c := claims()
	if want := []uint64{es[0].Seq, es[1].Seq, es[2].Seq}; !slices.Equal(c[0].seqs, want) {
		t.Errorf("first claim of %v; want the pump's three entries %v", c[0].seqs, want)
	}
	if want := []uint64{es[1].Seq, es[2].Seq}; !slices.Equal(c[1].seqs, want) || !c[1].until.Equal(reclaimAt.Add(2*redelivery+enqueueWait)) {
		t.Errorf("second claim of %v until %v; want the two not started %v, until %v (twice dlr_redelivery and the wait for a send to start, from then)", c[1].seqs, c[1].until, want, reclaimAt.Add(2*redelivery+enqueueWait))
	}
}
