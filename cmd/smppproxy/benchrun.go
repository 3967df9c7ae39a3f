package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

// keyPlanner draws, submit after submit, the index of its key: a new one,
// or with probability d an earlier one (at random among those sent).
type keyPlanner struct {
	rnd         *mrand.Rand
	d           float64
	i           int
	fresh, dups int
}

func newKeyPlanner(d float64) *keyPlanner {
	return &keyPlanner{rnd: mrand.New(mrand.NewPCG(1, 2)), d: d}
}

// next returns the key index of the next submit and whether it reuses an
// earlier key.
func (p *keyPlanner) next() (k int, dup bool) {
	i := p.i
	p.i++
	// Spread the duplicates evenly: submit i is one when the running
	// total floor((i+1)·d) grows.
	if p.fresh > 0 && int(float64(i+1)*p.d) > int(float64(i)*p.d) {
		p.dups++
		return p.rnd.IntN(p.fresh), true
	}
	p.fresh++
	return p.fresh - 1, false
}

// benchPlan returns, for every submit in order, the index of its key: a
// new one, or with probability d an earlier one.
func benchPlan(count int, d float64) (plan []int, dups int) {
	p := newKeyPlanner(d)
	plan = make([]int, count)
	for i := range plan {
		plan[i], _ = p.next()
	}
	return plan, p.dups
}

type benchSample struct {
	lat    []time.Duration
	status map[smpp.Status]int
	errs   int
	// errKinds counts the errors by text, sequence numbers left out
	// (errorKind).
	errKinds map[string]int
	// ids: key index → message id of the accepted submits (benchOptions.IDs).
	ids map[int]string
}

// runBench binds o.Binds sessions to o.Target and sends o.Count submits
// through them (or as many as o.Duration allows), o.Window outstanding
// per session.
func runBench(ctx context.Context, o benchOptions) (benchResult, error) {
	if err := o.validate(); err != nil {
		return benchResult{}, err
	}
	o.Timeout = cmp.Or(o.Timeout, 10*time.Second)
	if o.KeyPrefix == "" {
		o.KeyPrefix = randomPrefix()
	}
	res := benchResult{Label: o.Label, Target: o.Target, Binds: o.Binds, Window: o.Window, Statuses: map[string]int{}}
	clients, err := dialBenchClients(ctx, o)
	defer closeClients(clients)
	if err != nil {
		return res, err
	}
	var rc *receiptCounter
	if o.Receipts {
		o.dlr = newReceiptLatency()
		rc = countReceipts(clients, o.dlr)
		defer rc.stop()
	}
	bar := startProgress(o.Progress, o.Label, o.Count)
	// The feed stops early when every bind is lost (the workers return).
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	feed := feedJobs(fctx, o)
	start := time.Now()
	samples := runWorkers(ctx, o, clients, feed.jobs, bar)
	elapsed := time.Since(start)
	stopFeed()
	for range feed.jobs { // until the feed has closed it: sent and dups are final
	}
	bar.stop()
	res.Count, res.DuplicateSubmits = feed.sent, feed.dups
	res.addSamples(samples, elapsed)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: interrupted: %w", err)
	}
	if err := allLost(clients); err != nil {
		return res, fmt.Errorf("bench: stopped after %d submits: no bind left (%w)", res.Count, err)
	}
	if rc != nil {
		n, perSec := rc.wait(ctx, cmp.Or(o.ReceiptQuiet, time.Second), o.Timeout)
		res.Receipts, res.ReceiptsPerSecond = &n, perSec
		lat, matched := o.dlr.result()
		res.ReceiptLatencyMS, res.ReceiptsMatched = &lat, matched
	}
	unbindClients(ctx, clients)
	return res, nil
}

// allLost returns the last client's error when every client's connection
// is gone, else nil.
func allLost(clients []*esme.Client) error {
	var last error
	for _, c := range clients {
		select {
		case <-c.Done():
			last = c.Err()
		default:
			return nil
		}
	}
	if last == nil {
		last = esme.ErrClosed
	}
	return last
}

// dialBenchClients binds o.Binds sessions to o.Target in parallel. The
// slice holds every client bound, also on error.
func dialBenchClients(ctx context.Context, o benchOptions) ([]*esme.Client, error) {
	clients := make([]*esme.Client, o.Binds)
	errs := make([]error, o.Binds)
	var g sync.WaitGroup
	for i := range clients {
		addr := o.Target
		if len(o.Targets) > 0 {
			addr = o.Targets[i%len(o.Targets)]
		}
		g.Go(func() {
			clients[i], errs[i] = esme.Dial(ctx, addr, esme.Options{
				SystemID: o.SystemID, Password: o.Password, Bind: smpp.BindTransceiver, Window: o.Window, Timeout: o.Timeout,
			})
		})
	}
	g.Wait()
	if err := errors.Join(errs...); err != nil {
		return clients, fmt.Errorf("bench: %w", err)
	}
	return clients, nil
}

func closeClients(clients []*esme.Client) {
	for _, c := range clients {
		if c != nil {
			c.Close()
		}
	}
}

// unbindClients unbinds every client, for up to 2s in all.
func unbindClients(ctx context.Context, clients []*esme.Client) {
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, c := range clients {
		_ = c.Unbind(ectx)
	}
}

// benchProgress counts the submits done and, with a writer, draws them
// as a progress bar.
type benchProgress struct {
	done    atomic.Int64
	stopBar chan struct{}
	barDone chan struct{}
}

func startProgress(w io.Writer, label string, total int) *benchProgress {
	p := &benchProgress{stopBar: make(chan struct{}), barDone: make(chan struct{})}
	if w == nil {
		close(p.barDone)
		return p
	}
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("submits"), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
	go func() {
		defer close(p.barDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stopBar:
				_ = bar.Set64(p.done.Load())
				_ = bar.Finish()
				return
			case <-t.C:
				_ = bar.Set64(p.done.Load())
			}
		}
	}()
	return p
}

func (p *benchProgress) stop() {
	close(p.stopBar)
	<-p.barDone
}

// benchFeed hands out the key indexes to submit; sent and dups are final
// once jobs is closed.
type benchFeed struct {
	jobs       chan int
	sent, dups int
}

// pacer spaces submits evenly at a rate: submit i is due at start +
// i/rate, and is released as soon as it is due. A wake-up that comes late
// releases every submit due by then at once, so the offered rate stays the
// rate however coarse the timer; nothing goes out ahead of its time, so
// there is no burst (a token bucket that starts full would send its whole
// burst at once: at 5,000/s with a burst of 10%, the first 500 submits,
// which is a saturation peak in a fixed-rate run, not a fixed rate).
type pacer struct {
	rate  float64
	start time.Time
	n     int
	now   func() time.Time
	sleep func(context.Context, time.Duration)
}

func newPacer(rate float64, now func() time.Time, sleep func(context.Context, time.Duration)) *pacer {
	return &pacer{rate: rate, start: now(), now: now, sleep: sleep}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wait returns when the next submit is due, or ctx's error once it ends.
// Catching up is not capped: after the workers stalled (the window full),
// every submit due meanwhile goes out as soon as a worker takes it, which
// keeps the offered rate; the window bounds how many are in flight.
func (p *pacer) wait(ctx context.Context) error {
	due := p.start.Add(time.Duration(float64(p.n) * float64(time.Second) / p.rate))
	p.n++
	if d := due.Sub(p.now()); d > 0 {
		p.sleep(ctx, d)
	}
	return ctx.Err()
}

// feedJobs plans o.Count submits (o.Duplicates of them reusing a key) and
// hands them to the workers at o.Rate (0 = as fast as they take them),
// until o.Duration (0 = no limit) or ctx ends.
func feedJobs(ctx context.Context, o benchOptions) *benchFeed {
	f := &benchFeed{jobs: make(chan int)}
	go func() {
		defer close(f.jobs)
		var pace *pacer
		if o.Rate > 0 {
			pace = newPacer(o.Rate, time.Now, sleepCtx)
		}
		var deadline <-chan time.Time
		if o.Duration > 0 {
			t := time.NewTimer(o.Duration)
			defer t.Stop()
			deadline = t.C
		}
		plan := newKeyPlanner(o.Duplicates)
		for range o.Count {
			if pace != nil && pace.wait(ctx) != nil {
				return
			}
			k, dup := plan.next()
			select {
			case f.jobs <- k:
				f.sent++
				if dup {
					f.dups++
				}
			case <-deadline:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return f
}

// runWorkers submits the jobs with o.Binds×o.Window workers, spread over
// the clients, until jobs is closed.
func runWorkers(ctx context.Context, o benchOptions, clients []*esme.Client, jobs <-chan int, p *benchProgress) []benchSample {
	workers := o.Binds * o.Window
	samples := make([]benchSample, workers)
	var g sync.WaitGroup
	for w := range workers {
		c := clients[w%o.Binds]
		s := &samples[w]
		s.status, s.errKinds = map[smpp.Status]int{}, map[string]int{}
		if o.IDs {
			s.ids = map[int]string{}
		}
		g.Go(func() {
			// A worker whose bind is lost stops taking submits: the other
			// binds carry on, and with none left the bench stops.
			for {
				select {
				case k, ok := <-jobs:
					if !ok {
						return
					}
					s.submit(ctx, c, o, k)
					p.done.Add(1)
				case <-c.Done():
					return
				}
			}
		})
	}
	g.Wait()
	return samples
}

// benchSubmit is the submit of key index k: its text and destination
// follow from k, so a retry of a key sends the same content.
func benchSubmit(o benchOptions, k int) esme.Submit {
	key := o.KeyPrefix + strconv.Itoa(k)
	sub := esme.Submit{
		Src: "Bench", SrcTON: 5, Dst: fmt.Sprintf("4479%08d", k), DstTON: 1, DstNPI: 1,
		Text: []byte("bench message " + key),
	}
	if !o.NoKey {
		sub.Key, sub.KeyTag = key, o.KeyTag
	}
	if o.Receipts {
		sub.RegisteredDelivery = 1
	}
	return sub
}

// submit sends the submit of key index k on c and records the outcome.
func (s *benchSample) submit(ctx context.Context, c *esme.Client, o benchOptions, k int) {
	t0 := time.Now()
	r, err := c.Submit(ctx, benchSubmit(o, k))
	if err != nil {
		s.errs++
		s.errKinds[errorKind(err)]++
		return
	}
	s.lat = append(s.lat, time.Since(t0))
	s.status[r.Status]++
	if o.dlr != nil && r.Status == smpp.StatusOK {
		o.dlr.answered(r.MessageID, time.Now())
	}
	if s.ids != nil && r.Status == smpp.StatusOK {
		s.ids[k] = r.MessageID
	}
}

// addSamples sums the workers' samples into r.
func (r *benchResult) addSamples(samples []benchSample, elapsed time.Duration) {
	var all []time.Duration
	for _, s := range samples {
		all = append(all, s.lat...)
		r.Errors += s.errs
		for st, n := range s.status {
			r.Statuses[st.String()] += n
		}
		for e, n := range s.errKinds {
			if r.ErrorCounts == nil {
				r.ErrorCounts = map[string]int{}
			}
			r.ErrorCounts[e] += n
		}
		for k, id := range s.ids {
			if r.ids == nil {
				r.ids = map[int]string{}
			}
			r.ids[k] = id
		}
	}
	r.Answered = len(all)
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.Throughput = float64(r.Answered) / r.Seconds
	}
	r.LatencyMS = percentiles(all)
	r.ErrorSamples = errorLines(r.ErrorCounts, 5)
}

// receiptCounter counts the delivery receipts the bench's clients receive
// (they acknowledge them by themselves).
type receiptCounter struct {
	done        chan struct{}
	wg          sync.WaitGroup
	mu          sync.Mutex
	n           int
	first, last time.Time
}

func countReceipts(clients []*esme.Client, lat *receiptLatency) *receiptCounter {
	rc := &receiptCounter{done: make(chan struct{})}
	for _, c := range clients {
		rc.wg.Go(func() {
			for {
				select {
				case d := <-c.Receipts():
					if d.IsReceipt() {
						now := time.Now()
						rc.add(now)
						lat.received(d.ReceiptedID, now)
					}
				case <-c.Done():
					return
				case <-rc.done:
					return
				}
			}
		})
	}
	return rc
}

func (rc *receiptCounter) add(at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.n == 0 {
		rc.first = at
	}
	rc.n++
	rc.last = at
}

// wait returns the receipts received once none came for quiet (or limit
// passed), and their rate from the first to the last.
func (rc *receiptCounter) wait(ctx context.Context, quiet, limit time.Duration) (int, float64) {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(quiet / 10)
	defer t.Stop()
	lastSeen, since := -1, time.Now()
	for {
		rc.mu.Lock()
		n, first, last := rc.n, rc.first, rc.last
		rc.mu.Unlock()
		if n != lastSeen {
			lastSeen, since = n, time.Now()
		}
		if time.Since(since) >= quiet || time.Now().After(deadline) || ctx.Err() != nil {
			rate := 0.0
			if span := last.Sub(first).Seconds(); n > 1 && span > 0 {
				rate = float64(n) / span
			}
			return n, rate
		}
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (rc *receiptCounter) stop() {
	close(rc.done)
	rc.wg.Wait()
}

// randomPrefix is a fresh key prefix, so that runs against a proxy with a
// persistent store do not replay each other.
func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "b" + hex.EncodeToString(b[:]) + "-"
}
