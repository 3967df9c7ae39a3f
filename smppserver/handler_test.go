package smppserver

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// unbind is answered with unbind_resp, and the connection is closed right
// after it is flushed.
func TestUnbind(t *testing.T) {
	t.Parallel()
	srv, _, addr := runRecorded(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	s := sessionOf(t, srv, c)
	seq := c.send(smpp.CmdUnbind, nil)
	c.expect("unbind", smpp.CmdUnbind|smpp.RespBit, seq, smpp.StatusOK)
	c.expectClosed("after unbind_resp")
	if got := waitClosed(t, s); got != ReasonUnbind {
		t.Errorf("CloseReason() = %v, want %v", got, ReasonUnbind)
	}
}

func TestHandlerFailures(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		handler    HandlerFunc
		cmd        uint32
		resp       uint32
		wantPanics uint64
	}{
		"submit_sm, handler writes nothing": {
			handler: func(context.Context, ResponseWriter, *Request) {},
			cmd:     smpp.CmdSubmitSM, resp: smpp.CmdSubmitSM | smpp.RespBit,
		},
		"query_sm, handler writes nothing": {
			handler: func(context.Context, ResponseWriter, *Request) {},
			cmd:     smpp.CmdQuerySM, resp: smpp.CmdQuerySM | smpp.RespBit,
		},
		"alert_notification, handler writes nothing": {
			handler: func(context.Context, ResponseWriter, *Request) {},
			cmd:     smpp.CmdAlertNotif, resp: smpp.CmdGenericNack,
		},
		"submit_sm, handler panics": {
			handler: func(context.Context, ResponseWriter, *Request) { panic("boom") },
			cmd:     smpp.CmdSubmitSM, resp: smpp.CmdSubmitSM | smpp.RespBit,
			wantPanics: 1,
		},
		"submit_sm, handler panics with a nil error": {
			handler: func(context.Context, ResponseWriter, *Request) { panic(error(nil)) },
			cmd:     smpp.CmdSubmitSM, resp: smpp.CmdSubmitSM | smpp.RespBit,
			wantPanics: 1,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(HandlerFunc(func(ctx context.Context, w ResponseWriter, r *Request) {
				if string(r.Frame[smpp.HeaderLen:]) == "\x00ok" {
					okHandler(ctx, w, r)
					return
				}
				tt.handler(ctx, w, r)
			}))
			addr := RunLocalServer(t, srv)
			c := dialBound(t, addr, smpp.CmdBindTransceiver)
			seq := c.send(tt.cmd, nil)
			c.expect(name, tt.resp, seq, smpp.StatusSysErr)
			if got := srv.Panics(); got != tt.wantPanics {
				t.Errorf("%s: Panics() = %d, want %d", name, got, tt.wantPanics)
			}
			if got := srv.Unwritten(); got != 1 {
				t.Errorf("%s: Unwritten() = %d, want 1", name, got)
			}
			// The session and the server keep serving.
			seq = c.send(smpp.CmdSubmitSM, []byte("\x00ok"))
			c.expect(name+": next submit on the same session", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusOK)
			dialBound(t, addr, smpp.CmdBindTransceiver)
		})
	}
}

func TestResponseWriterWritesOnce(t *testing.T) {
	t.Parallel()
	errs := make(chan [3]error, 1)
	written := make(chan [2]bool, 1)
	srv := newTestServer(HandlerFunc(func(_ context.Context, w ResponseWriter, r *Request) {
		before := w.Written()
		var e [3]error
		e[0] = w.WriteStatus(smpp.StatusInvDstAdr)
		e[1] = w.WriteStatus(smpp.StatusOK)
		e[2] = w.WriteFrame(smpp.SubmitResp(smpp.StatusOK, r.Header.Sequence, "late"))
		written <- [2]bool{before, w.Written()}
		errs <- e
	}))
	addr := RunLocalServer(t, srv)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	c.submit("first write wins", smpp.StatusInvDstAdr)
	e := <-errs
	if e[0] != nil || !errors.Is(e[1], ErrAlreadyWritten) || !errors.Is(e[2], ErrAlreadyWritten) {
		t.Errorf("write errors = %v, want [nil %v %v]", e, ErrAlreadyWritten, ErrAlreadyWritten)
	}
	if w := <-written; w != [2]bool{false, true} {
		t.Errorf("Written() before/after = %v, want [false true]", w)
	}
	c.expectOpen("after extra writes") // nothing else was sent
	if got := srv.Unwritten(); got != 0 {
		t.Errorf("Unwritten() = %d, want 0", got)
	}
}

func TestChainOrder(t *testing.T) {
	var calls []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, w ResponseWriter, r *Request) {
				calls = append(calls, name)
				next.ServeSMPP(ctx, w, r)
			})
		}
	}
	h := Chain(HandlerFunc(func(context.Context, ResponseWriter, *Request) { calls = append(calls, "handler") }),
		mw("auth"), mw("ratelimit"), mw("dedup"))
	h.ServeSMPP(context.Background(), nil, nil)
	if want := []string{"auth", "ratelimit", "dedup", "handler"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("Chain call order = %v, want %v", calls, want)
	}
}

func TestStatusResponse(t *testing.T) {
	tests := map[string]struct {
		id       uint32
		wantID   uint32
		wantBody []byte
	}{
		"submit_sm":          {smpp.CmdSubmitSM, smpp.CmdSubmitSM | smpp.RespBit, []byte{0}},
		"data_sm":            {smpp.CmdDataSM, smpp.CmdDataSM | smpp.RespBit, []byte{0}},
		"deliver_sm":         {smpp.CmdDeliverSM, smpp.CmdDeliverSM | smpp.RespBit, []byte{0}},
		"bind_transceiver":   {smpp.CmdBindTransceiver, smpp.CmdBindTransceiver | smpp.RespBit, []byte{0}},
		"query_sm":           {smpp.CmdQuerySM, smpp.CmdQuerySM | smpp.RespBit, []byte{}},
		"cancel_sm":          {smpp.CmdCancelSM, smpp.CmdCancelSM | smpp.RespBit, []byte{}},
		"unbind":             {smpp.CmdUnbind, smpp.CmdUnbind | smpp.RespBit, []byte{}},
		"alert_notification": {smpp.CmdAlertNotif, smpp.CmdGenericNack, []byte{}},
		"outbind":            {smpp.CmdOutbind, smpp.CmdGenericNack, []byte{}},
	}
	for name, tt := range tests {
		b := StatusResponse(smpp.Header{ID: tt.id, Sequence: 99}, smpp.StatusThrottled)
		h := smpp.ParseHeader(b)
		want := smpp.Header{Length: uint32(smpp.HeaderLen + len(tt.wantBody)), ID: tt.wantID, Status: smpp.StatusThrottled, Sequence: 99}
		if h != want || !reflect.DeepEqual(b[smpp.HeaderLen:], tt.wantBody) {
			t.Errorf("StatusResponse(%s) = %+v body %x, want %+v body %x", name, h, b[smpp.HeaderLen:], want, tt.wantBody)
		}
	}
}

// A panicking Authenticator refuses the bind like a handler panic fails a
// request: recovered, counted, and the server keeps serving.
func TestAuthenticatorPanic(t *testing.T) {
	t.Parallel()
	srv := newTestServer(nil)
	srv.Auth = AuthFunc(func(ctx context.Context, r BindRequest) (*Principal, smpp.Status) {
		if r.SystemID == "crash" {
			panic("auth backend exploded")
		}
		return testAuth(ctx, r)
	})
	addr := RunLocalServer(t, srv)
	c := dialESME(t, addr)
	if h, _ := c.bind(smpp.CmdBindTransceiver, "crash", password); h.Status != smpp.StatusBindFail {
		t.Fatalf("bind with a panicking Authenticator: status = %v, want %v", h.Status.String(), smpp.StatusBindFail.String())
	}
	c.expectClosed("after a panicking Authenticator")
	if got := srv.Panics(); got != 1 {
		t.Errorf("Panics() = %d, want 1", got)
	}
	dialBound(t, addr, smpp.CmdBindTransceiver)
}

// heldSubmit is a handler that holds the submit of sequence 2 until free
// (at the latest when the test ends, before the server's shutdown, which
// waits for it) and answers every request as okHandler does.
type heldSubmit struct {
	entered, release chan struct{}
	once             sync.Once
	cancelled        atomic.Bool // the held submit's context had ended
}

func startHeldSubmit(t *testing.T) (*Server, string, *heldSubmit) {
	t.Helper()
	hs := &heldSubmit{entered: make(chan struct{}), release: make(chan struct{})}
	srv, addr := startServer(t, HandlerFunc(func(ctx context.Context, w ResponseWriter, r *Request) {
		if r.Header.ID == smpp.CmdSubmitSM && r.Header.Sequence == 2 {
			close(hs.entered)
			<-hs.release
			hs.cancelled.Store(ctx.Err() != nil)
		}
		okHandler(ctx, w, r)
	}))
	t.Cleanup(hs.free)
	return srv, addr, hs
}

func (hs *heldSubmit) free() { hs.once.Do(func() { close(hs.release) }) }

// answeredThenUnbound frees the held submit sub and checks that the
// client gets its answer, then the answer to its unbind unb (the first),
// and that the session closes as unbound.
func (hs *heldSubmit) answeredThenUnbound(t *testing.T, c *esme, s *Session, sub, unb uint32) {
	t.Helper()
	hs.free()
	c.expect("the submit in flight at the unbind", smpp.CmdSubmitSM|smpp.RespBit, sub, smpp.StatusOK)
	c.expect("the unbind's answer after the submit's", smpp.CmdUnbind|smpp.RespBit, unb, smpp.StatusOK)
	c.expectClosed("after unbind_resp")
	if got := waitClosed(t, s); got != ReasonUnbind {
		t.Errorf("CloseReason() = %v, want %v", got, ReasonUnbind)
	}
}

// submitThenUnbind sends the submit hs holds, then an unbind once it is
// held, and waits until the session took the unbind.
func (hs *heldSubmit) submitThenUnbind(t *testing.T, c *esme, s *Session) (sub, unb uint32) {
	t.Helper()
	sub = c.send(smpp.CmdSubmitSM, submitBody("in flight"))
	<-hs.entered
	unb = c.send(smpp.CmdUnbind, nil)
	waitFor(t, "the session to take the unbind", s.isUnbinding)
	return sub, unb
}

// A client that submits and unbinds straight away gets its submit's answer
// before the unbind_resp. Before, the unbind_resp went out at once and
// closed the session under the submit: its answer never came, and its
// handler's context was cancelled (from review; an untracked submit's
// retry is a second message).
func TestUnbindAnswersTheSubmitsInFlightFirst(t *testing.T) {
	t.Parallel()
	srv, addr, hs := startHeldSubmit(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	s := sessionOf(t, srv, c)
	sub, unb := hs.submitThenUnbind(t, c, s)
	hs.answeredThenUnbound(t, c, s, sub, unb)
	if hs.cancelled.Load() {
		t.Errorf("the submit's handler saw its context cancelled by the unbind")
	}
}

// While its unbind waits for the submits in flight, the session reads on:
// the ESME's answer to a deliver_sm sent before its unbind still counts,
// and a request it sends after the unbind is refused 0x08. From review:
// the reader stopped at the unbind, so the deliver_sm_resp was dropped
// (the receipt delivered again later) and the late request got no answer.
func TestAnUnbindingSessionStillTakesAnswersAndRefusesNewRequests(t *testing.T) {
	t.Parallel()
	srv, addr, hs := startHeldSubmit(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	s := sessionOf(t, srv, c)
	delivered := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		_, err := s.Request(ctx, smpp.CmdDeliverSM, submitBody("receipt"))
		delivered <- err
	}()
	dh, _ := c.read() // the deliver_sm, not answered yet
	if dh.ID != smpp.CmdDeliverSM {
		t.Fatalf("first frame from the server: %s, want deliver_sm", fmtHeader(dh))
	}
	sub, unb := hs.submitThenUnbind(t, c, s)
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, dh.Sequence, []byte{0}))
	if err := <-delivered; err != nil {
		t.Errorf("the deliver_sm answered after the ESME's unbind = %v, want its answer taken", err)
	}
	late := c.send(smpp.CmdSubmitSM, submitBody("after the unbind"))
	c.expect("a submit after the unbind", smpp.CmdSubmitSM|smpp.RespBit, late, smpp.StatusSysErr)
	hs.answeredThenUnbound(t, c, s, sub, unb)
}

// Unbinds repeated while the first waits for the submits in flight start
// nothing: the first one's answer closes the session. From review: each
// started two goroutines that lived until the submits were answered, for
// 16 bytes of the client's each.
func TestRepeatedUnbindsWhileTheFirstWaitsStartNothing(t *testing.T) {
	t.Parallel()
	srv, addr, hs := startHeldSubmit(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	s := sessionOf(t, srv, c)
	sub, unb := hs.submitThenUnbind(t, c, s)
	before := runtime.NumGoroutine()
	var frames []byte
	for seq := uint32(100); seq < 1100; seq++ {
		frames = append(frames, smpp.EncodeSimple(smpp.CmdUnbind, smpp.StatusOK, seq, nil)...)
	}
	c.write(frames)
	late := c.send(smpp.CmdSubmitSM, submitBody("after the unbinds")) // read after all of them
	c.expect("a submit after the unbinds", smpp.CmdSubmitSM|smpp.RespBit, late, smpp.StatusSysErr)
	if grown := runtime.NumGoroutine() - before; grown > 100 {
		t.Errorf("1000 repeated unbinds left %d goroutines more, want none of their own", grown)
	}
	hs.answeredThenUnbound(t, c, s, sub, unb)
}

// A reload's SetUnbindWait is what a client's unbind waits from then on,
// over the wait the server was made with (the proxy calls it with the
// timeouts a reload put in force; from review: the wait stayed the one of
// the start).
func TestSetUnbindWaitReplacesTheWaitTheServerWasMadeWith(t *testing.T) {
	srv := &Server{UnbindWait: 40 * time.Second}
	if got := srv.unbindWait(); got != 40*time.Second {
		t.Fatalf("unbindWait() = %v, want the configured 40s", got)
	}
	srv.SetUnbindWait(75 * time.Second)
	if got := srv.unbindWait(); got != 75*time.Second {
		t.Errorf("unbindWait() after SetUnbindWait(75s) = %v", got)
	}
}
