package smppserver

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// OnBound reports every bound session once, OnClosed once with the
// reason it ended.
func TestBoundSessionsReportedOnceBoundOnceClosed(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		end  func(t *testing.T, c *esme, s *Session)
		want CloseReason
	}{
		"unbind": {
			end: func(t *testing.T, c *esme, _ *Session) {
				seq := c.send(smpp.CmdUnbind, nil)
				c.expect("unbind", smpp.CmdUnbind|smpp.RespBit, seq, smpp.StatusOK)
			},
			want: ReasonUnbind,
		},
		"client closes": {
			end:  func(_ *testing.T, c *esme, _ *Session) { _ = c.conn.Close() },
			want: ReasonClientClosed,
		},
		"client half-closes": {
			end:  func(_ *testing.T, c *esme, _ *Session) { _ = c.conn.(*net.TCPConn).CloseWrite() },
			want: ReasonClientClosed,
		},
		"kick": {
			end:  func(_ *testing.T, _ *esme, s *Session) { s.Kick() },
			want: ReasonKicked,
		},
		"bad command_length": {
			end: func(_ *testing.T, c *esme, _ *Session) {
				hdr := make([]byte, smpp.HeaderLen)
				smpp.PutHeader(hdr, smpp.Header{Length: 9, ID: smpp.CmdSubmitSM, Sequence: 9})
				c.write(hdr)
			},
			want: ReasonProtocolError,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, rec, addr := runRecorded(t)
			c := dialBound(t, addr, smpp.CmdBindReceiver)
			s := sessionOf(t, srv, c)
			up := rec.next(t)
			if want := (sessionEvent{id: s.ID(), up: true, account: "shop", bind: smpp.BindReceiver}); up != want {
				t.Errorf("%s: OnBound = %+v, want %+v", name, up, want)
			}
			tt.end(t, c, s)
			down := rec.next(t)
			if want := (sessionEvent{id: s.ID(), up: false, account: "shop", bind: smpp.BindReceiver, reason: tt.want}); down != want {
				t.Errorf("%s: OnClosed = %+v, want %+v", name, down, want)
			}
			if got := s.CloseReason(); got != tt.want {
				t.Errorf("%s: CloseReason() = %v, want %v", name, got, tt.want)
			}
			if srv.Session(s.ID()) != nil {
				t.Errorf("%s: Server.Session(%s) still returns the closed session", name, s.ID())
			}
			rec.none(t, name)
		})
	}
}

// Sessions that never bind are not reported.
func TestHooksIgnoreUnboundSessions(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	srv := newTestServer(nil)
	rec.attach(srv)
	srv.BindTimeout = 300 * time.Millisecond
	addr := RunLocalServer(t, srv)
	timedOut := dialESME(t, addr)
	timedOut.expectClosed("unbound session")
	refused := dialESME(t, addr)
	if h, _ := refused.bind(smpp.CmdBindTransceiver, "shop", "wrong"); h.Status != smpp.StatusBindFail {
		t.Fatalf("bind with a wrong password: status = %v, want %v", h.Status.String(), smpp.StatusBindFail.String())
	}
	refused.expectClosed("refused bind")
	rec.none(t, "unbound sessions")
}

// A hook may kick the session it is told about.
func TestOnBoundHookMayKick(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	srv := newTestServer(nil)
	rec.attach(srv)
	srv.OnBound = func(s *Session) {
		rec.hook(s, true)
		s.Kick()
	}
	addr := RunLocalServer(t, srv)
	c := dialESME(t, addr)
	c.send(smpp.CmdBindTransceiver, bindBody("shop", password))
	drainUntilClosed(t, c, "session kicked by its hook")
	if ev := rec.next(t); !ev.up {
		t.Errorf("first hook call = %+v, want OnBound", ev)
	}
	if ev := rec.next(t); ev.up || ev.reason != ReasonKicked {
		t.Errorf("second hook call = %+v, want OnClosed with %v", ev, ReasonKicked)
	}
}

// A client that unbinds and hangs up at once (many do, without waiting
// for the unbind_resp) ended its session by unbinding, not by going away:
// the close is counted and logged as unbind.
func TestUnbindFollowedByAnImmediateHangUpClosesAsUnbind(t *testing.T) {
	t.Parallel()
	_, rec, c := boundRecorded(t)
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, c.nextSeq(), nil))
	_ = c.conn.Close()
	if ev := rec.next(t); ev.up || ev.reason != ReasonUnbind {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonUnbind)
	}
}

// At shutdown the server unbinds a session; a client that answers and hangs
// up at once was closed by the shutdown, not by itself.
func TestShutdownUnbindAnsweredWithAHangUpClosesAsServerShutdown(t *testing.T) {
	t.Parallel()
	srv, rec, c := boundRecorded(t)
	go func() { _ = srv.Shutdown(context.Background()) }()
	h, _, err := c.tryRead(ioTimeout)
	if err != nil || h.ID != smpp.CmdUnbind {
		t.Fatalf("after Shutdown got %s, %v; want an unbind", fmtHeader(h), err)
	}
	c.write(smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
	_ = c.conn.Close()
	if ev := rec.next(t); ev.up || ev.reason != ReasonServerShutdown {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonServerShutdown)
	}
}
