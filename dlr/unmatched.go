package dlr

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/state"
)

// DefaultUnmatchedMax is how many unmatched receipts are kept per upstream
// at most (Config.UnmatchedMax).
const DefaultUnmatchedMax = 100_000

// CountUnmatchedEvicted is the Service.Count name of the unmatched
// receipts evicted to keep an upstream's queue at UnmatchedMax.
const CountUnmatchedEvicted = "unmatched_evicted"

// evictPage is the most entries one eviction round lists and deletes;
// evictParallel how many of those deletions are in flight at once (they
// share the store's group commits).
const (
	evictPage     = 256
	evictParallel = 32
)

// unmatchedBound keeps each upstream's unmatched queue at UnmatchedMax
// entries at most, so that an upstream sending receipts that match
// nothing cannot fill the disk: past the cap the oldest entries are
// deleted (oldest first, by the evictor goroutine, woken by added) and
// counted in smppproxy_receipts_unmatched_evicted_total{upstream}.
//
// The counts are kept in memory: set from the store's queue depths at
// Start and by every depth refresh (each minute, which also accounts for
// expired entries), raised by added, lowered by removed and by evictions.
// Between refreshes they may drift (an entry that expired is still
// counted; one the reconciler matched while the evictor deleted it is
// subtracted twice); the next refresh corrects them.
type unmatchedBound struct {
	max     int
	q       state.Queue
	log     *slog.Logger
	count   func(outcome string, n uint64) // Service.Count's counters
	evicted *prometheus.CounterVec
	wake    chan struct{} // capacity 1
	// logLimit: one eviction line per upstream and minute.
	logLimit *logx.Limiter

	mu    sync.Mutex
	n     map[string]int    // upstream → entries counted
	after map[string]uint64 // upstream → the last entry evicted: later lists start after it
}

func newUnmatchedBound(limit int, q state.Queue, log *slog.Logger, m *metrics, reg prometheus.Registerer, now func() time.Time) *unmatchedBound {
	b := &unmatchedBound{
		max: limit, q: q, log: log, count: m.add, logLimit: logx.NewLimiter(time.Minute, 1024, now),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "receipts", Name: "unmatched_evicted_total",
			Help: "Unmatched receipts deleted, oldest first, to keep an upstream's unmatched queue at its cap.",
		}, []string{"upstream"}),
		wake: make(chan struct{}, 1),
		n:    map[string]int{}, after: map[string]uint64{},
	}
	if reg != nil {
		reg.MustRegister(b.evicted)
	}
	return b
}

// added counts a receipt newly kept for upstream.
func (b *unmatchedBound) added(upstream string) {
	b.mu.Lock()
	b.n[upstream]++
	over := b.n[upstream] > b.max
	b.mu.Unlock()
	if over {
		b.kick()
	}
}

// removed counts a kept receipt of upstream deleted because it matched.
func (b *unmatchedBound) removed(upstream string) {
	b.mu.Lock()
	if b.n[upstream] > 0 {
		b.n[upstream]--
	}
	b.mu.Unlock()
}

// reset sets the counts from the store's depths of the unmatched queues.
func (b *unmatchedBound) reset(depths map[string]int) {
	over := false
	b.mu.Lock()
	clear(b.n)
	for up, n := range depths {
		b.n[up] = n
		over = over || n > b.max
	}
	b.mu.Unlock()
	if over {
		b.kick()
	}
}

func (b *unmatchedBound) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run is the evictor: it evicts every upstream's excess each time it is
// woken, until ctx ends.
func (b *unmatchedBound) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for b.evictRound(ctx) && ctx.Err() == nil {
		}
	}
}

// evictRound deletes up to evictPage of the oldest entries of each
// upstream over its cap; it reports whether some upstream is still over.
func (b *unmatchedBound) evictRound(ctx context.Context) (again bool) {
	b.mu.Lock()
	excess := map[string]int{}
	for up, n := range b.n {
		if n > b.max {
			excess[up] = n - b.max
		}
	}
	b.mu.Unlock()
	for up, n := range excess {
		if b.evict(ctx, up, min(n, evictPage)) {
			again = true
		}
	}
	return again
}

// evict deletes the n oldest entries of upstream's unmatched queue and
// reports whether it deleted any.
func (b *unmatchedBound) evict(ctx context.Context, up string, n int) bool {
	b.mu.Lock()
	after := b.after[up]
	b.mu.Unlock()
	es, err := b.q.List(ctx, unmatchedQueue(up), after, n)
	if err != nil {
		b.log.Warn("dlr: unmatched receipts over the cap not evicted: store refused the list", "upstream", up, "err", err)
		return false
	}
	if len(es) == 0 {
		// Counted more than there are (expired since the last refresh).
		b.mu.Lock()
		b.n[up] = min(b.n[up], b.max)
		b.mu.Unlock()
		return false
	}
	deleted := make([]bool, len(es))
	var wg sync.WaitGroup
	sem := make(chan struct{}, evictParallel)
	for i, e := range es {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			deleted[i] = b.q.Ack(ctx, e.Queue, e.Seq) == nil
		}()
	}
	wg.Wait()
	done := 0
	for _, ok := range deleted {
		if ok {
			done++
		}
	}
	b.mu.Lock()
	b.n[up] = max(b.n[up]-done, 0)
	if done == len(es) {
		b.after[up] = es[len(es)-1].Seq
	}
	b.mu.Unlock()
	b.evicted.WithLabelValues(up).Add(float64(done))
	b.count(CountUnmatchedEvicted, uint64(done))
	if done < len(es) {
		b.log.Warn("dlr: unmatched receipts over the cap not evicted: store refused the deletion", "upstream", up, "refused", len(es)-done)
		return false
	}
	if ok, n := b.logLimit.Allow(up); ok {
		b.log.Warn("dlr: unmatched receipts over the cap evicted, oldest first", "upstream", up, "evicted", done, "cap", b.max, "suppressed", n)
	}
	return true
}
