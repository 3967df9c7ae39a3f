package smppclient

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

func TestSubmitGetsMessageID(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)

	var journaled []uint32
	var journalSession string
	r, err := p.Submit(context.Background(), "", submitFrame, func(session string, seq uint32) error {
		journalSession = session
		journaled = append(journaled, seq)
		if n := f.submits.Load(); n != 0 {
			t.Errorf("beforeWrite: the server already has %d submits", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if r.Status != smpp.StatusOK || r.MessageID != "id-1" || r.Sequence != 1 {
		t.Errorf("Submit = %+v, want status 0, id-1, sequence 1", r)
	}
	if len(journaled) != 1 || journaled[0] != r.Sequence || journalSession != r.Session {
		t.Errorf("beforeWrite saw (%s, %v), response is (%s, %d)", journalSession, journaled, r.Session, r.Sequence)
	}
	ss := p.Sessions()
	if len(ss) != 1 || ss[0].ID != r.Session || ss[0].State != StateBound || ss[0].Bind != smpp.BindTransceiver || ss[0].Submits != 1 || ss[0].InFlight != 0 {
		t.Errorf("Sessions() = %+v", ss)
	}
	if got := smpp.ParseHeader(r.Frame).ID; got != smpp.CmdSubmitSM|smpp.RespBit {
		t.Errorf("response frame command = 0x%08X", got)
	}
	if st := p.Stats(); st.Written != 1 || st.Responses != 1 || st.Binds != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}

func TestSubmitResponses(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		switch {
		case h.ID == smpp.CmdSubmitSM && h.Sequence == 1:
			c.s.outstanding.Add(-1)
			c.write(smpp.GenericNack(smpp.StatusInvCmdID, h.Sequence))
		case h.ID == smpp.CmdSubmitSM && h.Sequence == 2:
			c.answer(h, smpp.StatusInvDstAdr)
		default:
			c.answer(h, smpp.StatusOK)
		}
	}
	p := newPool(t, f.addr, nil)
	querySM := func(seq uint32) []byte {
		return smpp.EncodeSimple(smpp.CmdQuerySM, 0, seq, []byte("id-9\x00\x01\x01src\x00"))
	}
	tests := []struct {
		name   string
		build  func(uint32) []byte
		status smpp.Status
		id     string
	}{
		{"generic_nack is a response", submitFrame, smpp.StatusInvCmdID, ""},
		{"permanent error", submitFrame, smpp.StatusInvDstAdr, ""},
		{"query_sm", querySM, smpp.StatusOK, "id-9"},
		{"accepted", submitFrame, smpp.StatusOK, "id-1"},
	}
	for _, tt := range tests {
		r, err := p.Submit(context.Background(), "", tt.build, nil)
		if err != nil || r.Status != tt.status || r.MessageID != tt.id {
			t.Errorf("%s: Submit = (%v %q, %v), want (%v %q, nil)", tt.name, r.Status, r.MessageID, err, tt.status, tt.id)
		}
	}
}

func TestWindowRespected(t *testing.T) {
	f := startFake(t)
	const window, total = 3, 20
	// The SMSC holds the submits until a full window (or the last one) has
	// arrived, then answers them together a moment later: a pool that
	// overfilled its window would send more in that moment.
	var mu sync.Mutex
	var held []smpp.Header
	seen := 0
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, h)
		seen++
		if len(held) < window && seen < total {
			return
		}
		batch := held
		held = nil
		f.goAfter(20*time.Millisecond, func() {
			for _, h := range batch {
				c.answer(h, smpp.StatusOK)
			}
		})
	}
	p := newPool(t, f.addr, func(c *Config) { c.Window = window; c.RouteWait = 5 * time.Second })
	waitUp(t, p, 1)

	var wg sync.WaitGroup
	for range total {
		wg.Go(func() {
			if _, err := submit(p, ""); err != nil {
				t.Errorf("Submit = %v", err)
			}
		})
	}
	wg.Wait()
	if got := f.maxOutstanding.Load(); got != window {
		t.Errorf("max outstanding at the SMSC = %d, want the window, %d", got, window)
	}
	if got := f.submits.Load(); got != total {
		t.Errorf("SMSC received %d submits, want %d", got, total)
	}
}

func TestWindowFullIsBusy(t *testing.T) {
	f := startFake(t)
	held := make(chan smpp.Header, 1)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) { held <- h }
	p := newPool(t, f.addr, func(c *Config) { c.Window = 1; c.RouteWait = 100 * time.Millisecond })
	waitUp(t, p, 1)

	first := make(chan error, 1)
	go func() { _, err := submit(p, ""); first <- err }()
	h := <-held
	_, err := submit(p, "")
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrBusy) || Ambiguous(err) {
		t.Errorf("Submit with the window full = %v, want ErrNotSent/ErrBusy", err)
	}
	f.lastConn().answer(h, smpp.StatusOK)
	if err := <-first; err != nil {
		t.Errorf("first Submit = %v", err)
	}
	if st := p.Stats(); st.Busy != 1 {
		t.Errorf("Stats().Busy = %d, want 1", st.Busy)
	}
}

func TestNoSessionWhenServerDown(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newPool(t, addr, func(c *Config) { c.RouteWait = 200 * time.Millisecond })

	start := time.Now()
	_, err = submit(p, "")
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrNoSession) || Ambiguous(err) {
		t.Errorf("Submit = %v, want ErrNotSent/ErrNoSession", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("Submit took %v, want about RouteWait (200ms)", d)
	}
	eventually(t, "bind failures", func() bool { return p.Stats().BindFailures >= 2 })
	if ss := p.Sessions(); len(ss) != 1 || ss[0].LastError == "" {
		t.Errorf("Sessions() = %+v, want one with LastError", ss)
	}
}

func TestBindRefused(t *testing.T) {
	f := startFake(t)
	f.bindStatus = smpp.StatusBindFail
	p := newPool(t, f.addr, func(c *Config) { c.RouteWait = 100 * time.Millisecond })
	if _, err := submit(p, ""); !errors.Is(err, ErrNoSession) {
		t.Errorf("Submit = %v, want ErrNoSession", err)
	}
	eventually(t, "LastError", func() bool {
		ss := p.Sessions()
		return len(ss) == 1 && ss[0].State != StateBound && strings.Contains(ss[0].LastError, "ESME_RBINDFAIL")
	})
}

func TestNothingWrittenWhenNotSent(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name        string
		ctx         context.Context
		build       func(uint32) []byte
		beforeWrite func(string, uint32) error
		want        error
	}{
		{"beforeWrite fails", context.Background(), submitFrame, func(string, uint32) error { return errTest }, errTest},
		{"context cancelled", cancelled, submitFrame, nil, context.Canceled},
		{"bad frame", context.Background(), func(uint32) []byte { return submitFrame(12345) }, nil, ErrNotSent},
		{"short frame", context.Background(), func(uint32) []byte { return []byte{1, 2} }, nil, ErrNotSent},
	}
	for _, tt := range tests {
		_, err := p.Submit(tt.ctx, "", tt.build, tt.beforeWrite)
		if !errors.Is(err, ErrNotSent) || !errors.Is(err, tt.want) || Ambiguous(err) {
			t.Errorf("%s: Submit = %v, want ErrNotSent wrapping %v", tt.name, err, tt.want)
		}
	}
	if _, err := submit(p, ""); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if got := f.submits.Load(); got != 1 {
		t.Errorf("SMSC received %d submits, want only the last one", got)
	}
}

func TestResponseTimeoutIsAmbiguous(t *testing.T) {
	f := startFake(t)
	held := make(chan smpp.Header, 1)
	f.onSubmit = func(_ *fakeConn, h smpp.Header, _ []byte) { held <- h }
	late := make(chan Response, 1)
	p := newPool(t, f.addr, func(c *Config) {
		c.ResponseTimeout = 150 * time.Millisecond
		c.OnLateResponse = func(session string, seq uint32, r Response) { late <- r }
	})
	waitUp(t, p, 1)

	r, err := submit(p, "")
	if !errors.Is(err, ErrTimeout) || !Ambiguous(err) || errors.Is(err, ErrNotSent) {
		t.Fatalf("Submit = %v, want ErrTimeout (ambiguous)", err)
	}
	if r.Session == "" || r.Sequence != 1 {
		t.Errorf("Submit response = %+v, want session and sequence of the lost request", r)
	}
	h := <-held
	f.lastConn().answer(h, smpp.StatusOK)
	select {
	case lr := <-late:
		if lr.Sequence != 1 || lr.Session != r.Session || lr.MessageID != "id-1" {
			t.Errorf("OnLateResponse got %+v", lr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLateResponse not called")
	}
	if st := p.Stats(); st.Timeouts != 1 || st.LateResponses != 1 {
		t.Errorf("Stats() = %+v, want 1 timeout and 1 late response", st)
	}
}

func TestSessionLostFailsPendingAndRebinds(t *testing.T) {
	f := startFake(t)
	var hold sync.Mutex
	holding := true
	held := make(chan struct{}, 10)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) {
		hold.Lock()
		defer hold.Unlock()
		if holding {
			held <- struct{}{}
			return
		}
		c.answer(h, smpp.StatusOK)
	}
	lost := make(chan string, 4)
	p := newPool(t, f.addr, func(c *Config) { c.OnSessionLost = func(s string) { lost <- s } })
	waitUp(t, p, 1)
	first := p.Sessions()[0].ID

	errs := make(chan error, 5)
	for range 5 {
		go func() { _, err := submit(p, ""); errs <- err }()
	}
	for range 5 {
		<-held
	}
	hold.Lock()
	holding = false
	hold.Unlock()
	f.dropConns()
	for range 5 {
		if err := <-errs; !errors.Is(err, ErrSessionLost) || !Ambiguous(err) {
			t.Errorf("Submit = %v, want ErrSessionLost", err)
		}
	}
	if s := <-lost; s != first {
		t.Errorf("OnSessionLost(%q), want %q", s, first)
	}
	r, err := submit(p, "")
	if err != nil {
		t.Fatalf("Submit after rebind = %v", err)
	}
	if r.Session == first || r.Sequence != 1 {
		t.Errorf("Submit after rebind used (%s, %d), want a new session from sequence 1", r.Session, r.Sequence)
	}
	if got := f.binds.Load(); got != 2 {
		t.Errorf("binds = %d, want 2", got)
	}
	if st := p.Stats(); st.SessionLost != 5 || st.Closed[ReasonPeerClosed] != 1 {
		t.Errorf("Stats() = %+v", st)
	}
	select {
	case s := <-lost:
		t.Errorf("OnSessionLost called again for %s", s)
	default:
	}
}

func TestThroughputCap(t *testing.T) {
	f := startFake(t)
	const perSecond = 50
	p := newPool(t, f.addr, func(c *Config) { c.Throughput = perSecond; c.Window = 50; c.RouteWait = 3 * time.Second })
	waitUp(t, p, 1)

	start := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for time.Since(start) < time.Second {
				if _, err := submit(p, ""); err != nil {
					t.Errorf("Submit = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	got := float64(f.submits.Load())
	// Every token was granted inside [start, now]: at most the burst plus
	// the rate times the elapsed time.
	if limit := float64(burst(perSecond)) + perSecond*elapsed; got > limit {
		t.Errorf("%v submits in %.2fs, cap is %.1f", got, elapsed, limit)
	}
	// A lower bound near the rate would flake on a loaded machine (a stalled
	// process only loses tokens); more than the burst shows tokens flow.
	if got <= float64(burst(perSecond)) {
		t.Errorf("%v submits in %.2fs: no token after the burst", got, elapsed)
	}
}

func TestThroughputExhaustedIsBusy(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, func(c *Config) { c.Throughput = 0.1; c.RouteWait = 100 * time.Millisecond })
	waitUp(t, p, 1)
	if _, err := submit(p, ""); err != nil {
		t.Fatalf("first Submit = %v", err)
	}
	start := time.Now()
	if _, err := submit(p, ""); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrBusy) {
		t.Errorf("second Submit = %v, want ErrNotSent/ErrBusy", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Submit took %v; a token 10s away cannot come within RouteWait", d)
	}
	if got := f.submits.Load(); got != 1 {
		t.Errorf("SMSC received %d submits, want 1", got)
	}
}

func TestThrottleBackoff(t *testing.T) {
	f := startFake(t)
	var mu sync.Mutex
	var answered, next time.Time
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		if h.Sequence == 1 {
			c.answer(h, smpp.StatusThrottled)
			answered = time.Now()
			return
		}
		next = time.Now()
		c.answer(h, smpp.StatusOK)
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusThrottled {
		t.Fatalf("Submit = (%v, %v), want ESME_RTHROTTLED", r.Status, err)
	}
	if _, err := submit(p, ""); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := next.Sub(answered); gap < throttleMin {
		t.Errorf("next submit came %v after the 0x58 answer, want >= %v", gap, throttleMin)
	}
}

func TestPreferSession(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, func(c *Config) { c.Binds = 2 })
	waitUp(t, p, 2)
	ss := p.Sessions()
	for _, want := range []string{ss[1].ID, ss[0].ID, ss[1].ID} {
		r, err := submit(p, want)
		if err != nil || r.Session != want {
			t.Errorf("Submit(prefer %s) = (%s, %v)", want, r.Session, err)
		}
	}
	if r, err := submit(p, "gone/x/1"); err != nil || r.Session == "" {
		t.Errorf("Submit(prefer unknown) = (%+v, %v), want any session", r, err)
	}
}

func TestTransmitterPlusReceiver(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, func(c *Config) { c.Bind = smpp.BindTransmitter; c.Receivers = true; c.Binds = 2 })
	waitUp(t, p, 2)
	eventually(t, "4 binds", func() bool { return f.binds.Load() == 4 })
	var tx, rx int
	for _, s := range p.Sessions() {
		switch s.Bind {
		case smpp.BindTransmitter:
			tx++
		case smpp.BindReceiver:
			rx++
		}
	}
	if tx != 2 || rx != 2 {
		t.Errorf("Sessions(): %d transmitters, %d receivers, want 2 and 2", tx, rx)
	}
	for range 4 {
		r, err := submit(p, "")
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		for _, s := range p.Sessions() {
			if s.ID == r.Session && s.Bind != smpp.BindTransmitter {
				t.Errorf("Submit used a %s session", s.Bind)
			}
		}
	}
}

func TestCloseDrainsAndUnbinds(t *testing.T) {
	f := startFake(t)
	type heldReq struct {
		c *fakeConn
		h smpp.Header
	}
	held := make(chan heldReq, 1)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) { held <- heldReq{c, h} }
	p := New(Config{Name: "up", Address: f.addr, Binds: 2, Logger: slog.New(slog.DiscardHandler),
		Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	p.Start()
	waitUp(t, p, 2)

	res := make(chan error, 1)
	go func() { _, err := submit(p, ""); res <- err }()
	req := <-held
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	eventually(t, "Close to start", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	if _, err := submit(p, ""); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotSent) {
		t.Errorf("Submit during Close = %v, want ErrNotSent/ErrClosed", err)
	}
	req.c.answer(req.h, smpp.StatusOK)
	if err := <-res; err != nil {
		t.Errorf("in-flight Submit during Close = %v, want its response", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v", err)
	}
	if got := f.unbinds.Load(); got != 2 {
		t.Errorf("SMSC received %d unbinds, want 2", got)
	}
	if p.Up() != 0 {
		t.Errorf("Up() = %d after Close", p.Up())
	}
	if st := p.Stats(); st.Closed[ReasonPoolClosed] != 2 {
		t.Errorf("Stats().Closed = %v", st.Closed)
	}
}

// A throttled session's pause is measured on the injected clock: while
// the clock stands still the session stays out (Submit gives up after
// route_wait with ErrBusy, however long that is in real time); once the
// clock passes the pause it takes submits again.
func TestThrottlePauseFollowsTheInjectedClock(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) {
		if h.Sequence == 1 {
			c.answer(h, smpp.StatusThrottled)
			return
		}
		c.answer(h, smpp.StatusOK)
	}
	clock := &testClock{t: time.Unix(1000, 0)}
	p := newPool(t, f.addr, func(c *Config) { c.Now, c.RouteWait = clock.Now, 3*throttleMin })
	waitUp(t, p, 1)
	if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusThrottled {
		t.Fatalf("Submit = (%v, %v), want ESME_RTHROTTLED", r.Status, err)
	}
	if _, err := submit(p, ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("Submit during the pause = %v, want ErrBusy", err)
	}
	clock.Add(throttleMax)
	if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusOK {
		t.Fatalf("Submit after the pause = (%v, %v), want accepted", r.Status, err)
	}
}

// Under WithoutWaiting a submit takes a window slot and a throughput token
// only if free at once: with the window full, or the tokens used up, it is
// turned away busy at once (nothing sent), where it would otherwise wait
// out RouteWait (an hour here).
func TestWithoutWaitingIsBusyAtOnceWhenNothingIsFree(t *testing.T) {
	f := startFake(t)
	held := make(chan smpp.Header, 1)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) { held <- h }
	p := newPool(t, f.addr, func(c *Config) { c.Window = 1; c.RouteWait = time.Hour })
	waitUp(t, p, 1)
	first := make(chan error, 1)
	go func() { _, err := submit(p, ""); first <- err }()
	h := <-held
	if _, err := p.Submit(WithoutWaiting(context.Background()), "", submitFrame, nil); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrBusy) {
		t.Errorf("Submit without waiting, window full = %v, want ErrNotSent/ErrBusy", err)
	}
	if st := p.Stats(); st.Busy != 0 {
		t.Errorf("Stats().Busy = %d after a submit turned away without waiting, want 0 (it is tried again, waiting)", st.Busy)
	}
	f.lastConn().answer(h, smpp.StatusOK)
	if err := <-first; err != nil {
		t.Fatalf("first Submit = %v", err)
	}
	// A free slot is taken as usual.
	go func() { h := <-held; f.lastConn().answer(h, smpp.StatusOK) }()
	if _, err := p.Submit(WithoutWaiting(context.Background()), "", submitFrame, nil); err != nil {
		t.Errorf("Submit without waiting, a slot free = %v, want sent", err)
	}

	g := startFake(t)
	q := newPool(t, g.addr, func(c *Config) { c.Throughput = 0.001; c.RouteWait = time.Hour })
	waitUp(t, q, 1)
	if _, err := submit(q, ""); err != nil {
		t.Fatalf("first Submit = %v", err)
	}
	if _, err := q.Submit(WithoutWaiting(context.Background()), "", submitFrame, nil); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrBusy) {
		t.Errorf("Submit without waiting, no token = %v, want ErrNotSent/ErrBusy", err)
	}
	if got := g.submits.Load(); got != 1 {
		t.Errorf("SMSC received %d submits, want 1", got)
	}
}
