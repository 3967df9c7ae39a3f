// Package route sends an owned submit to an upstream: it picks an upstream
// of the account's route by weight among the healthy ones (weight 0 =
// backup, used only while every weighted upstream is down; an upstream that
// keeps failing cools down and is left out while another is up), keeps all
// segments of one concatenated message on its upstream while that upstream
// has a bound session (cooling down or not; retries of a segment included)
// and, when it can list its binds, on one bind of it, retries temporary
// errors within
// bounds, and adapts smppclient's outcomes to the dedup engine's (answered,
// not sent, ambiguous).
package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/clock"
	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// Upstream is the part of an smppclient.Pool the router needs. An Upstream
// that can also list its binds (Sessions() []smppclient.SessionInfo, as a
// Pool and any wrapper embedding one can) gets all segments of one
// concatenated message on one bind; otherwise only on one upstream.
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
	// Now is the clock of the health tracking, the segment memory, the
	// retry budget and the validity period check (injectable for tests;
	// default time.Now). Tests advance it from Sleep.
	Now func() time.Time

	// FailThreshold is how many failures in a row (response timeouts,
	// sessions lost after the write, temporary errors other than 0x58)
	// make an upstream cool down: Pick leaves it out while another member
	// of the route is up (default 5).
	FailThreshold int
	// Cooldown is the first cool-down; each further failure right after
	// one doubles it, up to MaxCooldown (defaults 1s and 30s).
	Cooldown, MaxCooldown time.Duration
	// StickyTTL is how long the upstream and bind of a concatenated
	// message are remembered for its later segments (default 2m).
	StickyTTL time.Duration
}

// Defaults of Config.
const (
	DefaultFailThreshold = 5
	DefaultCooldown      = time.Second
	DefaultMaxCooldown   = 30 * time.Second
	DefaultStickyTTL     = 2 * time.Minute
)

// Router implements dedup.Forwarder over per-account routes.
type Router struct {
	cfg     Config
	retries atomic.Uint64
	sticky  stickyTable
	// routes is account → its members (SetRoutes replaces it whole);
	// healths, upstream name → its tracker (grown by SetRoutes, never
	// shrunk); drained, the upstreams taking no new submits.
	routes  atomic.Pointer[map[string][]Member]
	healths atomic.Pointer[map[string]*health]
	drained atomic.Pointer[map[string]bool] // nil when none is drained
	drainMu sync.Mutex                      // serialises Drain and Resume
	// warn rate-limits the per-submit lines about temporary errors (by
	// upstream, status and what was done).
	warn *logx.Limiter
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
		cfg.Sleep = clock.Sleep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FailThreshold <= 0 {
		cfg.FailThreshold = DefaultFailThreshold
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.MaxCooldown < cfg.Cooldown {
		cfg.MaxCooldown = max(DefaultMaxCooldown, cfg.Cooldown)
	}
	if cfg.StickyTTL <= 0 {
		cfg.StickyTTL = DefaultStickyTTL
	}
	r := &Router{cfg: cfg, sticky: stickyTable{ttl: cfg.StickyTTL},
		warn: logx.NewLimiter(smppclient.WarnInterval, 256, cfg.Now)}
	r.healths.Store(&map[string]*health{})
	r.SetRoutes(cfg.Routes)
	r.cfg.Routes = nil // read from r.routes
	return r
}

// SetRoutes puts routes in force (account → its members in order), for
// the submits that pick a member from now on; a submit being forwarded
// finishes on the member it has. An upstream keeps its health tracking
// across calls. Not safe to call concurrently with itself.
func (r *Router) SetRoutes(routes map[string][]Member) {
	old := *r.healths.Load()
	hs := make(map[string]*health, len(old))
	for name, h := range old {
		hs[name] = h
	}
	cp := make(map[string][]Member, len(routes))
	for acct, ms := range routes {
		cp[acct] = append([]Member(nil), ms...)
		for _, m := range ms {
			if name := m.Upstream.Name(); hs[name] == nil {
				hs[name] = &health{}
			}
		}
	}
	r.healths.Store(&hs)
	r.routes.Store(&cp)
}

// members is account's route without the drained upstreams (the route
// itself, not a copy, while none is drained: the common case, per submit).
func (r *Router) members(account string) []Member {
	all := (*r.routes.Load())[account]
	drained := r.drained.Load()
	if drained == nil {
		return all
	}
	out := make([]Member, 0, len(all))
	for _, m := range all {
		if !(*drained)[m.Upstream.Name()] {
			out = append(out, m)
		}
	}
	return out
}

// Drain stops new submits to upstream name: routes skip it as if it were
// down (a segment of a message that went there goes elsewhere); submits
// already written to it finish, and its binds stay up (receipts keep
// coming). It reports whether the upstream was not drained already.
func (r *Router) Drain(name string) bool { return r.setDrained(name, true) }

// Resume undoes Drain; it reports whether the upstream was drained.
func (r *Router) Resume(name string) bool { return r.setDrained(name, false) }

// setDrained replaces the drained set (nil when empty) and reports
// whether name's membership changed.
func (r *Router) setDrained(name string, drained bool) bool {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	set := map[string]bool{}
	if cur := r.drained.Load(); cur != nil {
		maps.Copy(set, *cur)
	}
	if set[name] == drained {
		return false
	}
	if drained {
		set[name] = true
	} else {
		delete(set, name)
	}
	if len(set) == 0 {
		r.drained.Store(nil)
	} else {
		r.drained.Store(&set)
	}
	return true
}

// Drained reports whether upstream name is drained.
func (r *Router) Drained(name string) bool {
	set := r.drained.Load()
	return set != nil && (*set)[name]
}

// DefaultBackoff is 50ms doubling per retry, capped at 1s, with ±50% jitter.
func DefaultBackoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(max(n-1, 0), 5)
	d = min(d, time.Second)
	return d/2 + rand.N(d)
}

// Retries is how many internal retries of temporary errors were made.
func (r *Router) Retries() uint64 { return r.retries.Load() }

// Forward sends the attempt and classifies the outcome. A temporary error
// (0x08, 0x14, 0x58, 0x64) is retried on another upstream of the route when
// there is one (else on the same upstream, whose pool avoids a throttled
// bind), with exponential back-off and jitter, bounded by the first
// member's Attempts and Budget and by the attempt's validity deadline.
// Every outcome feeds the upstream's health (see Config.FailThreshold). A
// segment of a concatenated message goes to the upstream its message's
// first written segment went to while that upstream has a bound session,
// whether or not it cools down, and its in-proxy retries retry that
// upstream (SPEC §6); the remembered upstream is never replaced, even by a
// segment that had to go elsewhere while it was down. Within it, the
// segment prefers the bind the earlier segments went to while that bind is
// up (a preference: when its window is full the pool uses another bind of
// the same upstream). When nothing was sent because the
// chosen upstream had no free slot (or throughput token, or bind) for its
// route_wait, the submit tries the next member of the route that
// qualifies, waiting its route_wait in turn (not a segment, which stays on
// its upstream); the 0x58 (or 0x08) comes when every qualifying member
// was tried. So back-pressure is per route: a submit gets 0x58 only when
// every upstream it may use stayed full for its route_wait.
func (r *Router) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	segKey := a.Account + "\x00" + string(a.Submit.SrcAddr) + "\x00" + string(a.Submit.DstAddr)
	var msgKey string
	if a.Segment.Total > 0 {
		msgKey = messageKey(segKey, a.Segment)
	}
	start := r.cfg.Now()
	avoid := map[string]bool{}
	var attempts int
	var budget time.Duration
	n := 0      // attempts answered by an upstream
	closed := 0 // picks whose pool was closed
	for tries := 1; ; tries++ {
		m, prefer, ok := r.pick(a.Account, a.Segment, segKey, msgKey, avoid)
		if !ok {
			return dedup.Result{Kind: dedup.NotSent, Status: smpp.StatusSysErr, Err: errors.New("route: account has no route (none configured, or every upstream of it drained)")}
		}
		if tries == 1 {
			attempts, budget = max(m.Attempts, 1), m.Budget
		}
		res := r.try(ctx, a, m, prefer)
		res.Attempts = tries
		r.observe(a, res)
		if msgKey != "" && res.Session != "" && res.Kind != dedup.NotSent {
			r.sticky.put(msgKey, res.Upstream, res.Session, r.cfg.Now())
		}
		if res.Kind == dedup.NotSent && errors.Is(res.Err, smppclient.ErrClosed) && closed < maxClosedPicks && ctx.Err() == nil {
			// Nothing was sent: a reload closed the pool, and the routes in
			// force name the one that replaced it (or none, if the upstream
			// was removed). A pool that stays closed is a shutdown.
			closed++
			tries-- // not an attempt
			continue
		}
		if res.Kind == dedup.NotSent {
			// Nothing was sent. When the upstream had no free slot (or no
			// bind) for route_wait, another member with room takes it: the
			// route is only full when all of it is.
			full := errors.Is(res.Err, smppclient.ErrBusy) || errors.Is(res.Err, smppclient.ErrNoSession)
			avoid[res.Upstream] = true
			if full && msgKey == "" && ctx.Err() == nil && r.overflowTarget(a.Account, avoid) {
				r.cfg.Logger.Debug("upstream full: overflowing to another upstream of the route", "account", a.Account, "key", a.Key, "upstream", res.Upstream)
				continue
			}
			return res
		}
		if res.Kind != dedup.Answered || !res.Status.Temporary() {
			return res
		}
		n++
		why := ""
		pause := r.cfg.Backoff(n)
		switch {
		case n >= attempts:
			why = fmt.Sprintf("attempts exhausted (%d)", attempts)
		case budget > 0 && r.cfg.Now().Sub(start)+pause > budget:
			why = fmt.Sprintf("retry budget exhausted (%v)", budget)
		case !a.Deadline.IsZero() && r.cfg.Now().Add(pause).After(a.Deadline):
			why = "validity period over"
		}
		if why != "" {
			r.logTemporary(a, res, n, "temporary upstream error; not retried", "reason", why)
			res.Err = fmt.Errorf("route: temporary status %s, %s", res.Status, why)
			return res
		}
		r.logTemporary(a, res, n, "temporary upstream error; retrying", "pause", pause)
		r.retries.Add(1)
		if msgKey == "" {
			avoid[res.Upstream] = true // a segment stays on its message's upstream
		}
		r.cfg.Sleep(ctx, pause)
	}
}

// maxClosedPicks bounds the picks again of a submit whose upstream's pool
// was closed (by a reload, or a shutdown) before it was written.
const maxClosedPicks = 4

// logTemporary logs a line about a temporary error at most once per
// smppclient.WarnInterval per upstream, status and message (an upstream
// answering 0x58 to everything must not make a line per submit); the next
// line logged says how many were held back.
func (r *Router) logTemporary(a *dedup.Attempt, res dedup.Result, n int, msg string, args ...any) {
	ok, suppressed := r.warn.Allow(res.Upstream + "\x00" + res.Status.String() + "\x00" + msg)
	if !ok {
		return
	}
	args = append(args, "account", a.Account, "key", a.Key, "upstream", res.Upstream, "status", res.Status.String(), "attempt", n)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.cfg.Logger.Info(msg, args...)
}

// observe feeds an outcome to the upstream's health tracking.
func (r *Router) observe(a *dedup.Attempt, res dedup.Result) {
	if d, tripped := r.health(res.Upstream).observe(classify(res), r.cfg.Now(), &r.cfg); tripped {
		r.cfg.Logger.Warn("upstream keeps failing: cooling down", "upstream", res.Upstream, "for", d,
			"account", a.Account, "key", a.Key, "last_status", res.Status.String(), "err", res.Err)
	}
}

func (r *Router) try(ctx context.Context, a *dedup.Attempt, m Member, prefer string) dedup.Result {
	name := m.Upstream.Name()
	var drop []uint16
	if a.KeyTag != 0 && !m.ForwardKeyTLV {
		drop = []uint16{a.KeyTag}
	}
	if a.NoWait {
		ctx = smppclient.WithoutWaiting(ctx)
	}
	resp, err := m.Upstream.Submit(ctx, prefer,
		func(seq uint32) []byte { return a.Submit.Frame(seq, drop...) },
		func(session string, seq uint32) error {
			err := a.Journal(name, session, seq)
			if err == nil {
				// The key is this submit's now: its later tries (a temporary
				// error retried) wait for capacity like any other.
				a.NoWait = false
			}
			return err
		})
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
