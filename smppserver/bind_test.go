package smppserver

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

func TestBindWithGoodCredentials(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)
	eachBindType(t, addr, func(t *testing.T, name string, tt bindType, c *esme) {
		h, sid := c.bind(tt.cmd, "shop", password)
		if h.Status != smpp.StatusOK {
			t.Fatalf("%s: status = %v, want %v", name, h.Status.String(), smpp.StatusOK.String())
		}
		if sid != sysID {
			t.Errorf("%s: system_id = %q, want %q", name, sid, sysID)
		}
		s := sessionOf(t, srv, c)
		if got := s.BindType(); got != tt.bind {
			t.Errorf("%s: BindType() = %v, want %v", name, got, tt.bind)
		}
		if got := s.Account(); got != "shop" {
			t.Errorf("%s: Account() = %q, want %q", name, got, "shop")
		}
		if s.BoundAt().IsZero() {
			t.Errorf("%s: BoundAt() is zero after bind", name)
		}
		c.expectOpen(name)
	})
}

func TestBindRefusedClosesConnection(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		systemID, password string
	}{
		"wrong password":    {"shop", "guess"},
		"unknown system_id": {"nobody", password},
		"empty credentials": {"", ""},
	}
	srv, rec, addr := runRecorded(t)
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := dialESME(t, addr)
			s := sessionOf(t, srv, c)
			h, _ := c.bind(smpp.CmdBindTransceiver, tt.systemID, tt.password)
			if h.Status != smpp.StatusBindFail {
				t.Fatalf("%s: status = %v, want %v", name, h.Status.String(), smpp.StatusBindFail.String())
			}
			c.expectClosed(name)
			if got := waitClosed(t, s); got != ReasonBindFailed {
				t.Errorf("%s: CloseReason() = %v, want %v", name, got, ReasonBindFailed)
			}
		})
	}
	rec.none(t, "refused binds")
}

func TestBindBeyondMaxBinds(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)

	first := dialESME(t, addr)
	first.mustBind(smpp.CmdBindTransmitter, "solo")

	extra := dialESME(t, addr)
	if h, _ := extra.bind(smpp.CmdBindReceiver, "solo", password); h.Status != smpp.StatusBindFail {
		t.Fatalf("bind beyond max_binds: status = %v, want %v", h.Status.String(), smpp.StatusBindFail.String())
	}
	extra.expectClosed("bind beyond max_binds")
	first.expectOpen("first bind after a refused extra bind")

	// The slot is given back when the first session ends.
	s := sessionOf(t, srv, first)
	s.Kick()
	first.expectClosed("kicked session")
	waitClosed(t, s)
	again := dialESME(t, addr)
	again.mustBind(smpp.CmdBindTransmitter, "solo")
}

// A reconnecting ESME rebinds as soon as it sees its old connection closed;
// the old session's slot must already be free by then.
func TestBindSlotFreeWhenConnectionCloses(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, nil)
	for i := range 50 {
		c := dialESME(t, addr)
		c.mustBind(smpp.CmdBindTransceiver, "solo")
		seq := c.send(smpp.CmdUnbind, nil)
		c.expect("unbind", smpp.CmdUnbind|smpp.RespBit, seq, smpp.StatusOK)
		c.expectClosed("after unbind_resp")
		next := dialESME(t, addr)
		if h, _ := next.bind(smpp.CmdBindTransceiver, "solo", password); h.Status != smpp.StatusOK {
			t.Fatalf("rebind %d right after the old connection closed: status = %v, want %v", i, h.Status.String(), smpp.StatusOK.String())
		}
		seq = next.send(smpp.CmdUnbind, nil)
		next.expect("unbind", smpp.CmdUnbind|smpp.RespBit, seq, smpp.StatusOK)
		next.expectClosed("after unbind_resp")
	}
}

func TestSecondBindOnBoundConnection(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	for _, cmd := range []uint32{smpp.CmdBindTransmitter, smpp.CmdBindReceiver, smpp.CmdBindTransceiver} {
		if h, _ := c.bind(cmd, "shop", password); h.Status != smpp.StatusAlyBnd {
			t.Errorf("second bind %#x: status = %v, want %v", cmd, h.Status.String(), smpp.StatusAlyBnd.String())
		}
	}
	c.submit("submit after a refused second bind", smpp.StatusOK)
	if got := sessionOf(t, srv, c).BindType(); got != smpp.BindTransceiver {
		t.Errorf("BindType() after second bind = %v, want %v", got, smpp.BindTransceiver)
	}
}

// A session closed while its bind is being authenticated (bind timeout,
// kick, shutdown) must neither keep a max_binds slot nor report a bind.
func TestBindClosedDuringAuthentication(t *testing.T) {
	t.Parallel()
	authStarted := make(chan struct{})
	authRelease := make(chan struct{})
	rec := newRecorder()
	srv := newTestServer(nil)
	rec.attach(srv)
	srv.Auth = AuthFunc(func(ctx context.Context, r BindRequest) (*Principal, smpp.Status) {
		if r.SystemType == "slow" {
			close(authStarted)
			<-authRelease
		}
		return testAuth(ctx, r)
	})
	addr := RunLocalServer(t, srv)

	slow := dialESME(t, addr)
	slow.send(smpp.CmdBindTransceiver, bindBodyType("solo", password, "slow"))
	<-authStarted
	s := sessionOf(t, srv, slow)
	s.Kick()
	close(authRelease)
	if got := waitClosed(t, s); got != ReasonKicked {
		t.Errorf("CloseReason() = %v, want %v", got, ReasonKicked)
	}
	slow.expectClosed("session kicked during its bind")

	c := dialESME(t, addr)
	if h, _ := c.bind(smpp.CmdBindTransceiver, "solo", password); h.Status != smpp.StatusOK {
		t.Fatalf("bind after a bind was cut short: status = %v, want %v (max_binds slot leaked)", h.Status.String(), smpp.StatusOK.String())
	}
	if ev := rec.next(t); !ev.up || ev.id == s.ID() {
		t.Errorf("first hook call = %+v, want the new session up (none for the session closed during its bind)", ev)
	}
}

// The bind timeout only concerns unbound sessions.
func TestBoundSessionOutlivesBindTimeout(t *testing.T) {
	t.Parallel()
	const bindTimeout = 300 * time.Millisecond
	_, addr := startServer(t, nil, func(s *Server) { s.BindTimeout = bindTimeout })
	c := dialBound(t, addr, smpp.CmdBindTransmitter)
	time.Sleep(bindTimeout + 100*time.Millisecond)
	c.expectOpen("bound session after BindTimeout")
}
