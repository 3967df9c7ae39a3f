package smppclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/smpp"
)

// WarnInterval is how often a per-PDU warning about what the upstream sends
// (a response nobody waits for, a delivery beyond DeliverWindow, an
// unsupported request) is logged at most, per upstream and kind; the line
// says how many were held back since the last one ("suppressed").
const WarnInterval = 10 * time.Second

// Pool is the set of sessions bound to one upstream. Its methods are safe
// for concurrent use.
type Pool struct {
	cfg     Config
	log     *slog.Logger
	limiter *rate.Limiter // nil: unlimited throughput
	// tokenMu serialises the limiter's calls, each with a time read under
	// it, so the times the limiter is given never go backwards:
	// rate.Limiter takes a caller's time as its new "last" even when it is
	// older than the one it holds, and then counts the interval between the
	// two again, granting more than the rate. Never held across I/O.
	tokenMu sync.Mutex
	// warn rate-limits the per-PDU warnings about what the upstream sends
	// (keyed by kind: one pool is one upstream).
	warn *logx.Limiter
	// delivering holds a token per OnDeliver call running on any session
	// (DeliverWindow).
	delivering chan struct{}
	ctx        context.Context
	cancel     context.CancelFunc // stops the bind loops; called by Close
	loops      sync.WaitGroup     // bind loops (each waits for its session's teardown)
	active     sync.WaitGroup     // Submit calls holding a window slot, drained by Close
	nextID     atomic.Uint64
	stats      counters
	// wrapConn, when set (by tests, before Start), wraps every connection
	// dialled.
	wrapConn func(net.Conn) net.Conn

	mu      sync.Mutex
	started bool
	closed  bool
	slots   []*session    // current session of each bind slot; nil before the first attempt
	wake    chan struct{} // closed (and cleared) to wake Submit calls waiting for a slot
	rr      int           // round-robin start for picking a session
}

// New returns a pool for cfg; Start binds it.
func New(cfg Config) *Pool {
	cfg = cfg.withDefaults()
	if cfg.InstanceID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.InstanceID = hex.EncodeToString(b[:])
	}
	n := cfg.Binds
	if cfg.splitReceivers() {
		n *= 2
	}
	p := &Pool{
		cfg:        cfg,
		log:        cfg.Logger.With("upstream", cfg.Name),
		slots:      make([]*session, n),
		delivering: make(chan struct{}, cfg.DeliverWindow),
		warn:       logx.NewLimiter(WarnInterval, 16, cfg.Now),
	}
	if cfg.Throughput > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.Throughput), burst(cfg.Throughput))
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Name returns the upstream name.
func (p *Pool) Name() string { return p.cfg.Name }

// Start starts every bind slot in the background; each rebinds with
// back-off until Close. Calling it again, or after Close, does nothing.
func (p *Pool) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	for i := range p.slots {
		p.loops.Add(1)
		go p.bindLoop(i)
	}
}

// Close stops taking requests, waits for the ones in flight to be answered,
// unbinds every session (waiting UnbindWait at most for unbind_resp) and
// waits for every goroutine of the pool to end. When ctx ends first the
// sessions are closed at once, pending requests get ErrSessionLost, and
// Close returns ctx.Err() once the goroutines are gone.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.wakeLocked()
	p.mu.Unlock()
	p.cancel() // no new binds; connecting sessions give up
	if already {
		p.loops.Wait()
		return nil
	}
	var err error
	drained := make(chan struct{})
	go func() { p.active.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	var bound []*session
	for _, s := range p.slots {
		if s != nil && s.state == StateBound {
			bound = append(bound, s)
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range bound {
		wg.Go(func() { s.shutdown(ctx) })
	}
	wg.Wait()
	p.loops.Wait()
	<-drained // every session is gone, so every Submit has let go of its slot
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// DeliverWindow is how many OnDeliver calls may run at once over the
// pool (Config.DeliverWindow after defaults).
func (p *Pool) DeliverWindow() int { return p.cfg.DeliverWindow }

// Up returns the number of bound sessions that can transmit.
func (p *Pool) Up() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.slots {
		if s != nil && s.tx && s.state == StateBound && !s.unbinding() {
			n++ // (not one that is unbinding: it takes no submits)
		}
	}
	return n
}

// Sessions describes the current session of every bind slot.
func (p *Pool) Sessions() []SessionInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]SessionInfo, 0, len(p.slots))
	for _, s := range p.slots {
		if s == nil {
			continue
		}
		out = append(out, SessionInfo{
			ID: s.id, State: s.state, Bind: s.bind, InFlight: s.inFlight, Window: p.cfg.Window,
			BoundSince: s.boundSince, LastError: s.lastErr, Submits: s.submits.Load(),
		})
	}
	return out
}

// wakeLocked wakes every Submit waiting for a slot.
func (p *Pool) wakeLocked() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// warnPDU logs a per-PDU warning of kind unless one of that kind was
// logged less than WarnInterval ago; it is then only counted, and the next
// line logged says how many were held back.
func (p *Pool) warnPDU(log *slog.Logger, kind, msg string, args ...any) {
	ok, suppressed := p.warn.Allow(kind)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Warn(msg, args...)
}

// noteStatus applies the throttle back-off of s after a response.
func (p *Pool) noteStatus(s *session, throttled bool) {
	if throttled {
		p.stats.throttled.Add(1)
		p.mu.Lock()
		s.throttlePause = min(throttleMax, max(throttleMin, 2*s.throttlePause))
		s.pausedUntil = p.cfg.Now().Add(s.throttlePause)
		pause := s.throttlePause
		p.mu.Unlock()
		s.throttled.Store(true)
		p.log.Debug("upstream throttled: pausing session", "session", s.id, "pause", pause)
		return
	}
	if s.throttled.Swap(false) {
		p.mu.Lock()
		s.throttlePause = 0
		p.mu.Unlock()
	}
}

func (p *Pool) bindLoop(slot int) {
	defer p.loops.Done()
	bind := p.cfg.Bind
	if p.cfg.splitReceivers() && slot >= p.cfg.Binds {
		bind = smpp.BindReceiver
	}
	for attempt := 0; ; {
		if p.ctx.Err() != nil {
			return
		}
		s := p.newSession(bind)
		p.mu.Lock()
		if prev := p.slots[slot]; prev != nil {
			s.lastErr = prev.lastErr // until this attempt binds
		}
		p.slots[slot] = s
		p.mu.Unlock()
		if err := s.connect(p.ctx); err != nil {
			p.mu.Lock()
			s.state, s.lastErr = StateClosed, err.Error()
			p.mu.Unlock()
			if p.ctx.Err() != nil {
				return
			}
			p.stats.bindFailures.Add(1)
			p.log.Warn("bind failed", "session", s.id, "bind", bind, "attempt", attempt+1, "err", err)
		} else if p.runSession(s, bind) {
			attempt = 0 // it stayed up: start the back-off again
		}
		attempt++
		p.cfg.Sleep(p.ctx, p.cfg.Backoff(attempt))
		if p.ctx.Err() != nil {
			return
		}
	}
}

// runSession runs a freshly bound session until it ends and reports
// whether it stayed bound for StableAfter (else the bind counts as a
// failed attempt for the back-off).
func (p *Pool) runSession(s *session, bind smpp.BindType) bool {
	p.stats.binds.Add(1)
	s.start()
	boundAt := p.cfg.Now()
	if p.markBound(s) {
		p.log.Info("bound", "session", s.id, "bind", bind.Name())
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*p.cfg.UnbindWait)
		s.shutdown(ctx)
		cancel()
	}
	s.wait()
	return p.cfg.Now().Sub(boundAt) >= p.cfg.StableAfter
}

func (p *Pool) newSession(bind smpp.BindType) *session {
	id := fmt.Sprintf("%s/%s/%d", p.cfg.Name, p.cfg.InstanceID, p.nextID.Add(1))
	return newSession(p, id, bind)
}

// markBound makes a freshly bound session eligible, unless the pool was
// closed or the session already dropped.
func (p *Pool) markBound(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || s.state != StateConnecting {
		return false
	}
	s.state, s.boundSince, s.lastErr = StateBound, time.Now(), ""
	p.wakeLocked()
	return true
}
