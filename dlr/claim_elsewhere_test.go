package dlr

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// sharedQueue is the store's queue as several processes share it
// (state.Claimer): the entries in elsewhere are being delivered by another
// process, so Claim refuses them and ListClaimable leaves them out; tried
// counts the claims of those entries that were asked all the same.
type sharedQueue struct {
	state.Queue
	mu        sync.Mutex
	elsewhere map[uint64]bool
	tried     int
}

func (q *sharedQueue) wrap(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q }

func (q *sharedQueue) Claim(ctx context.Context, queue string, seqs []uint64, owner string, until time.Time) ([]uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
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
	es, err := q.Queue.List(ctx, queue, after, limit+len(q.elsewhere))
	es = slices.DeleteFunc(es, func(e *state.QueueEntry) bool { return q.elsewhere[e.Seq] })
	return es[:min(len(es), limit)], err
}

// On a queue shared by several instances, a dispatcher delivers what no
// other instance is delivering and does not ask again and again to claim
// the entries another instance holds: each such claim is a write to the
// shared store that cannot succeed.
func TestADispatcherDoesNotTryToClaimWhatAnotherInstanceIsDelivering(t *testing.T) {
	sq := &sharedQueue{}
	e := newEnv(t, sq.wrap)
	want := queueReceipts(t, e, 4)
	es := queued(t, e.st, accountQueue("shop"))
	if len(es) != 4 {
		t.Fatalf("%d entries queued, want 4", len(es))
	}
	sq.mu.Lock()
	sq.elsewhere = map[uint64]bool{es[1].Seq: true, es[2].Seq: true}
	sq.mu.Unlock()
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "the two entries no other instance holds delivered", func() bool { return len(rx.received()) == 2 })
	if got := rx.received(); !slices.Equal(got, []string{want[0], want[3]}) {
		t.Errorf("delivered %v, want %v", got, []string{want[0], want[3]})
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if sq.tried != 0 {
		t.Errorf("%d claims of entries another instance is delivering", sq.tried)
	}
}
