// Package route sends an owned submit to an upstream: it picks an upstream
// of the account's route by weight among the healthy ones (weight 0 =
// backup, used only while every weighted upstream is down), keeps all
// segments of one concatenated message on one upstream, and adapts
// smppclient's outcomes to the dedup engine's (answered, not sent,
// ambiguous).
package route

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// Upstream is the part of an smppclient.Pool the router needs.
type Upstream interface {
	Name() string
	Up() int
	Submit(ctx context.Context, prefer string, build func(seq uint32) []byte, beforeWrite func(session string, seq uint32) error) (smppclient.Response, error)
}

// Member is one upstream of a route.
type Member struct {
	Upstream Upstream
	// Weight is its share of the traffic; 0 marks a backup.
	Weight int
	// ForwardKeyTLV keeps the idempotency key TLV on submits sent to it.
	ForwardKeyTLV bool
	// Attempts bounds the tries of one submit that meets temporary errors
	// (0x08, 0x14, 0x58, 0x64), the first included (default 1: no retry).
	Attempts int
	// Budget bounds the total time spent retrying (0 = no bound besides Attempts).
	Budget time.Duration
}

// Config configures a Router.
type Config struct {
	// Routes maps account → its members in order.
	Routes map[string][]Member
	// Backoff returns the pause before retry number n (1 for the first
	// retry). Default: 50ms doubling, capped at 1s, with ±50% jitter.
	Backoff func(n int) time.Duration
	Logger  *slog.Logger
	// Sleep waits d or until ctx ends (injectable for tests).
	Sleep func(ctx context.Context, d time.Duration)
}

// Router implements dedup.Forwarder over per-account routes.
type Router struct {
	cfg     Config
	routes  map[string][]Member
	retries atomic.Uint64
}

var _ dedup.Forwarder = (*Router)(nil)

// New returns a Router.
func New(cfg Config) *Router {
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	return &Router{cfg: cfg, routes: cfg.Routes}
}

// DefaultBackoff is 50ms doubling per retry, capped at 1s, with ±50% jitter.
func DefaultBackoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(max(n-1, 0), 5)
	d = min(d, time.Second)
	return d/2 + rand.N(d)
}

// Retries is how many internal retries of temporary errors were made.
func (r *Router) Retries() uint64 { return r.retries.Load() }

// Pick chooses the member for an attempt. segKey identifies the message a
// segment belongs to; all segments with one segKey get the same member
// while the set of healthy members does not change.
// Upstreams named in avoid are left out while another healthy member exists.
func (r *Router) Pick(account string, seg smpp.Segment, segKey string, avoid map[string]bool) (Member, bool) {
	all := r.routes[account]
	if len(all) == 0 {
		return Member{}, false
	}
	ms := all
	if len(avoid) > 0 {
		var rest []Member
		for _, m := range all {
			if !avoid[m.Upstream.Name()] && m.Upstream.Up() > 0 {
				rest = append(rest, m)
			}
		}
		if len(rest) > 0 {
			ms = rest
		}
	}
	var pool []Member
	total := 0
	for _, m := range ms {
		if m.Weight > 0 && m.Upstream.Up() > 0 {
			pool = append(pool, m)
			total += m.Weight
		}
	}
	if len(pool) == 0 {
		for _, m := range ms {
			if m.Weight == 0 && m.Upstream.Up() > 0 {
				pool = append(pool, m)
				total++
			}
		}
	}
	if len(pool) == 0 {
		// Nothing is up: take the first member and let it wait route_wait.
		return ms[0], true
	}
	var n int
	if seg.Total > 0 {
		h := fnv.New32a()
		h.Write([]byte(segKey))
		n = int(h.Sum32() % uint32(total))
	} else {
		n = rand.IntN(total)
	}
	for _, m := range pool {
		w := max(m.Weight, 1)
		if n < w {
			return m, true
		}
		n -= w
	}
	return pool[len(pool)-1], true
}

// Forward sends the attempt and classifies the outcome. A temporary error
// (0x08, 0x14, 0x58, 0x64) is retried on another upstream of the route when
// there is one (else on the same upstream, whose pool avoids a throttled
// bind), with exponential back-off and jitter, bounded by the first
// member's Attempts and Budget and by the attempt's validity deadline.
func (r *Router) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	segKey := a.Account + "\x00" + string(a.Submit.SrcAddr) + "\x00" + string(a.Submit.DstAddr)
	start := time.Now()
	avoid := map[string]bool{}
	var attempts int
	var budget time.Duration
	for n := 1; ; n++ {
		m, ok := r.Pick(a.Account, a.Segment, segKey, avoid)
		if !ok {
			return dedup.Result{Kind: dedup.NotSent, Status: smpp.StatusSysErr, Err: errors.New("route: account has no route")}
		}
		if n == 1 {
			attempts, budget = max(m.Attempts, 1), m.Budget
		}
		res := r.try(ctx, a, m)
		res.Attempts = n
		if res.Kind != dedup.Answered || !res.Status.Temporary() {
			return res
		}
		why := ""
		pause := r.cfg.Backoff(n)
		switch {
		case n >= attempts:
			why = fmt.Sprintf("attempts exhausted (%d)", attempts)
		case budget > 0 && time.Since(start)+pause > budget:
			why = fmt.Sprintf("retry budget exhausted (%v)", budget)
		case !a.Deadline.IsZero() && time.Now().Add(pause).After(a.Deadline):
			why = "validity period over"
		}
		log := r.cfg.Logger.With("account", a.Account, "key", a.Key, "upstream", res.Upstream, "status", res.Status.String(), "attempt", n)
		if why != "" {
			log.Info("temporary upstream error; not retried", "reason", why)
			res.Err = fmt.Errorf("route: temporary status %s, %s", res.Status, why)
			return res
		}
		log.Info("temporary upstream error; retrying", "pause", pause)
		r.retries.Add(1)
		avoid[res.Upstream] = true
		r.cfg.Sleep(ctx, pause)
	}
}

func (r *Router) try(ctx context.Context, a *dedup.Attempt, m Member) dedup.Result {
	name := m.Upstream.Name()
	var drop []uint16
	if a.KeyTag != 0 && !m.ForwardKeyTLV {
		drop = []uint16{a.KeyTag}
	}
	resp, err := m.Upstream.Submit(ctx, "",
		func(seq uint32) []byte { return a.Submit.Frame(seq, drop...) },
		func(session string, seq uint32) error { return a.Journal(name, session, seq) })
	res := dedup.Result{Upstream: name, Session: resp.Session, Sequence: resp.Sequence, Err: err}
	switch {
	case err == nil:
		res.Kind, res.Status, res.MessageID = dedup.Answered, resp.Status, resp.MessageID
	case errors.Is(err, smppclient.ErrNotSent):
		res.Kind, res.Status = dedup.NotSent, smpp.StatusSysErr
		if errors.Is(err, smppclient.ErrBusy) {
			res.Status = smpp.StatusThrottled
		}
	default:
		// Timeout, session lost, or anything we cannot classify: the PDU
		// may have reached the SMSC, so the outcome is ambiguous.
		res.Kind = dedup.Ambiguous
	}
	return res
}
