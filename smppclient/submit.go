package smppclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/smppproxy/smppproxy/smpp"
)

// Submit sends one request (submit_sm, query_sm, cancel_sm, …) on a bound
// transmitting session and returns the upstream's response. A response is
// returned with a nil error whatever its status.
//
// It waits up to RouteWait for a session with a free window slot
// (preferSession first, when it is bound and has one) and for a throughput
// token. build(seq) returns the whole frame carrying the session's next
// sequence number. beforeWrite(session, seq), when not nil, runs before any
// byte is written; its error aborts the request, wrapped in ErrNotSent.
//
// Every error either wraps ErrNotSent (nothing was written: ErrNoSession,
// ErrBusy, ErrClosed, the context's or beforeWrite's error, a failed
// write that took no byte of the frame, a bind unbinding) or is Ambiguous
// (ErrTimeout, ErrSessionLost, ErrBadAnswer). ctx
// is honoured until the frame is handed to the socket; after that only a
// response, ResponseTimeout or the loss of the session ends the call, so an
// ambiguous outcome is always reported as such.
func (p *Pool) Submit(ctx context.Context, preferSession string, build func(seq uint32) []byte, beforeWrite func(session string, seq uint32) error) (Response, error) {
	r, err := p.submit(ctx, preferSession, build, beforeWrite)
	if !NoWait(ctx) || !errors.Is(err, ErrNotSent) {
		// (A submit turned away for want of capacity free at once is
		// tried again, waiting: not a busy or sessionless upstream yet.)
		p.countOutcome(err)
	}
	return r, err
}

func (p *Pool) submit(ctx context.Context, prefer string, build func(uint32) []byte, beforeWrite func(string, uint32) error) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, notSent(err)
	}
	deadline := time.Now().Add(p.cfg.RouteWait)
	if NoWait(ctx) {
		deadline = time.Now()
	}
	for {
		r, err := p.try(ctx, prefer, deadline, build, beforeWrite)
		if errors.Is(err, errPickAgain) {
			continue // the session closed before anything was assigned
		}
		return r, err
	}
}

type noWaitKey struct{}

// WithoutWaiting returns ctx under which Submit takes a window slot and a
// throughput token only if they are free at once: otherwise it returns
// ErrBusy (or ErrNoSession) at once, nothing sent, instead of waiting up
// to RouteWait.
func WithoutWaiting(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

// NoWait reports whether ctx is one of WithoutWaiting.
func NoWait(ctx context.Context) bool { return ctx.Value(noWaitKey{}) != nil }

// errPickAgain: the session chosen closed before a sequence number was
// assigned; Submit picks another within the same RouteWait.
var errPickAgain = errors.New("smppclient: pick another session")

func (p *Pool) try(ctx context.Context, prefer string, deadline time.Time, build func(uint32) []byte, beforeWrite func(string, uint32) error) (Response, error) {
	s, err := p.acquire(ctx, prefer, deadline)
	if err != nil {
		return Response{}, notSent(err)
	}
	defer p.release(s)
	if err := p.takeToken(ctx, deadline); err != nil {
		return Response{}, notSent(err)
	}
	return s.roundTrip(ctx, build, beforeWrite)
}

func (p *Pool) countOutcome(err error) {
	c := &p.stats
	switch {
	case err == nil:
	case errors.Is(err, ErrNoSession):
		c.noSession.Add(1)
	case errors.Is(err, ErrBusy):
		c.busy.Add(1)
	case errors.Is(err, ErrNotSent):
		c.notSentOther.Add(1)
	case errors.Is(err, ErrTimeout):
		c.timeouts.Add(1)
	case errors.Is(err, ErrSessionLost):
		c.sessionLost.Add(1)
	case errors.Is(err, ErrBadAnswer), errors.Is(err, ErrUnclearAnswer):
		c.badAnswers.Add(1)
	}
}

// acquire reserves a window slot on a bound transmitting session, waiting
// until deadline at most.
func (p *Pool) acquire(ctx context.Context, prefer string, deadline time.Time) (*session, error) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		s, anyBound, retry := p.pickLocked(prefer, p.cfg.Now())
		if s != nil {
			s.inFlight++
			p.active.Add(1)
			p.mu.Unlock()
			return s, nil
		}
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		wake := p.wake
		p.mu.Unlock()

		wait := time.Until(deadline)
		if wait <= 0 {
			if anyBound {
				return nil, ErrBusy
			}
			return nil, ErrNoSession
		}
		if retry > 0 && retry < wait {
			wait = retry
		}
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pickLocked returns the least loaded eligible session (preferring the one
// named prefer), whether any transmitting session is bound, and how long
// until a throttle pause ends when that is what kept a session out.
func (p *Pool) pickLocked(prefer string, now time.Time) (best *session, anyBound bool, retry time.Duration) {
	n := len(p.slots)
	p.rr++
	for k := range n {
		s := p.slots[(p.rr+k)%n]
		if s == nil || !s.tx || s.state != StateBound || s.unbinding() {
			continue // (ending: unbinding, its submits would be refused)
		}
		anyBound = true
		if s.inFlight >= p.cfg.Window {
			continue
		}
		if now.Before(s.pausedUntil) {
			if d := s.pausedUntil.Sub(now); retry == 0 || d < retry {
				retry = d
			}
			continue
		}
		if prefer != "" && s.id == prefer {
			return s, true, 0
		}
		if best == nil || s.inFlight < best.inFlight {
			best = s
		}
	}
	return best, anyBound, retry
}

func (p *Pool) release(s *session) {
	p.mu.Lock()
	s.inFlight--
	p.wakeLocked()
	p.mu.Unlock()
	p.active.Done()
}

// takeToken waits for a throughput token, or fails at once with ErrBusy
// when none can be had before deadline.
func (p *Pool) takeToken(ctx context.Context, deadline time.Time) error {
	if p.limiter == nil {
		return nil
	}
	p.tokenMu.Lock()
	now := p.cfg.Now()
	r := p.limiter.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if r.OK() && d > 0 && now.Add(d).After(deadline) {
		r.CancelAt(now)
		d = -1
	}
	p.tokenMu.Unlock()
	switch {
	case !r.OK() || d < 0:
		return ErrBusy
	case d == 0:
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		p.cancelToken(r)
		return ctx.Err()
	case <-p.ctx.Done():
		p.cancelToken(r)
		return ErrClosed
	}
}

// cancelToken gives back a token reserved for a submit that gave up.
func (p *Pool) cancelToken(r *rate.Reservation) {
	p.tokenMu.Lock()
	defer p.tokenMu.Unlock()
	r.CancelAt(p.cfg.Now())
}

// roundTrip runs one request on s, whose window slot the caller holds.
func (s *session) roundTrip(ctx context.Context, build func(uint32) []byte, beforeWrite func(string, uint32) error) (Response, error) {
	select {
	case <-s.dead:
		return Response{}, errPickAgain
	default:
	}
	s.mu.Lock()
	if s.pending == nil {
		s.mu.Unlock()
		return Response{}, errPickAgain
	}
	seq := s.nextSeqLocked()
	c := &call{pending: pending{ch: make(chan result, 1)}}
	pd := &c.pending
	s.pending[seq] = pd
	s.mu.Unlock()
	base := Response{Session: s.id, Sequence: seq}

	frame := build(seq)
	if err := checkFrame(frame, seq); err != nil {
		s.forget(seq)
		return base, notSent(err)
	}
	pd.cmd.Store(smpp.ParseHeader(frame).ID)
	if beforeWrite != nil {
		if err := beforeWrite(s.id, seq); err != nil {
			s.forget(seq)
			return base, notSent(err)
		}
	}
	if wr := s.writeFrame(ctx, c, frame); wr.err != nil {
		if !s.forget(seq) {
			// Answered meanwhile (the frame went out before the write
			// failed on what followed it in its batch), or failed by the
			// session's end: an answer is the outcome.
			if res := <-pd.ch; res.err == nil {
				return res.resp, nil
			}
		}
		if wr.n == 0 {
			return base, notSent(wr.err)
		}
		return base, fmt.Errorf("%w: session %s sequence %d: partial write: %w", ErrSessionLost, s.id, seq, wr.err)
	}

	t := smpp.AcquireTimer(s.p.cfg.ResponseTimeout)
	defer smpp.ReleaseTimer(t)
	var res result
	select {
	case res = <-pd.ch:
	case <-t.C:
		if s.forget(seq) {
			s.log.Warn("response timeout", "seq", seq, "timeout", s.p.cfg.ResponseTimeout)
			return base, fmt.Errorf("%w: session %s sequence %d", ErrTimeout, s.id, seq)
		}
		res = <-pd.ch
	}
	if res.err != nil {
		return base, fmt.Errorf("%w: session %s sequence %d", res.err, s.id, seq)
	}
	return res.resp, nil
}

// writeFrame hands frame (c's request) to the session's writer and waits
// until it is written, or refused.
func (s *session) writeFrame(ctx context.Context, c *call, frame []byte) writeResult {
	c.writeReq = writeReq{frame: frame, ctx: ctx, done: make(chan writeResult, 1), pd: &c.pending}
	req := &c.writeReq
	select {
	case s.writeq <- req:
		select {
		case wr := <-req.done:
			return wr
		case <-s.writerDone:
			select {
			case wr := <-req.done:
				return wr
			default: // the writer left without taking it
				return writeResult{err: errSessionClosed}
			}
		}
	case <-s.writerDone:
		return writeResult{err: errSessionClosed}
	}
}

// checkFrame rejects a frame from build that could not be what was
// journaled: a bad length, another sequence number, a response.
func checkFrame(frame []byte, seq uint32) error {
	if len(frame) < smpp.HeaderLen {
		return fmt.Errorf("smppclient: build returned %d bytes", len(frame))
	}
	h := smpp.ParseHeader(frame)
	if int(h.Length) != len(frame) || h.Sequence != seq || h.IsResponse() {
		return fmt.Errorf("smppclient: build returned a bad frame (length %d of %d, command 0x%08X, sequence %d, want %d)",
			h.Length, len(frame), h.ID, h.Sequence, seq)
	}
	return nil
}

// call is one request of roundTrip: what waits for the response and what
// the writer is handed, in one allocation.
type call struct {
	pending
	writeReq
}
