package smppserver

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Shutdown stops accepting, sends unbind to the ESME, waits until the
// in-flight request is answered and flushed, then closes.
func TestShutdownDrainsInFlight(t *testing.T) {
	t.Parallel()
	g := newGatedHandler(2) // the bind is sequence 1
	rec := newRecorder()
	srv := newTestServer(g)
	rec.attach(srv)
	addr, served := runLocalServer(t, srv)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	rec.next(t)
	seq := c.send(smpp.CmdSubmitSM, submitBody("in flight"))
	g.waitStarted(t, 1)

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shutdown <- srv.Shutdown(ctx)
	}()

	h, _ := c.read()
	if h.ID != smpp.CmdUnbind {
		t.Fatalf("first frame after Shutdown: got %s, want an unbind", fmtHeader(h))
	}
	c.write(smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))

	awaitErr(t, served, ErrServerClosed, "Serve()", "Serve did not return after Shutdown")
	expectRefused(t, addr)

	// Requests arriving while draining are refused, not handled.
	c.submit("submit while draining", smpp.StatusSysErr)

	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}

	close(g.gates[seq])
	c.expect("in-flight submit", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusOK)
	c.expectClosed("after the in-flight answer")
	awaitErr(t, shutdown, nil, "Shutdown()", "Shutdown did not return after the drain")
	if ev := rec.next(t); ev.up || ev.reason != ReasonServerShutdown {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonServerShutdown)
	}
	if err := srv.Serve(mustListen(t)); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v, want %v", err, ErrServerClosed)
	}
}

// Every bound session is sent an unbind before it is closed, even when it
// has nothing in flight.
func TestShutdownUnbindsIdleSessions(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		srv, addr := startServer(t, nil)
		c := dialBound(t, addr, smpp.CmdBindTransceiver)
		unbound := dialESME(t, addr)
		sessionOf(t, srv, unbound)

		shutdown := make(chan error, 1)
		go func() { shutdown <- srv.Shutdown(context.Background()) }()

		h, _, err := c.tryRead(ioTimeout)
		if err != nil || h.ID != smpp.CmdUnbind {
			t.Fatalf("round %d: after Shutdown got %s, %v; want an unbind", i, fmtHeader(h), err)
		}
		c.write(smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
		c.expectClosed("bound session after Shutdown")
		unbound.expectClosed("unbound session after Shutdown")
		if err := <-shutdown; err != nil {
			t.Fatalf("round %d: Shutdown() = %v, want nil", i, err)
		}
	}
}

// Shutdown with an expired context closes at once, cancels the handlers'
// context and returns the context's error.
func TestShutdownExpiredContext(t *testing.T) {
	t.Parallel()
	g := newGatedHandler(2) // never released: only the session context ends it
	srv := newTestServer(g)
	addr, served := runLocalServer(t, srv)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	c.send(smpp.CmdSubmitSM, submitBody("stuck"))
	g.waitStarted(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- srv.Shutdown(ctx) }()
	awaitErrOr(t, shutdown, context.DeadlineExceeded, "Shutdown(expired ctx)", "Shutdown(expired ctx) did not return with a handler waiting on its context", g.abort)
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve() = %v, want %v", err, ErrServerClosed)
	}
	drainUntilClosed(t, c, "session after a hard shutdown")
	expectRefused(t, addr)
}

// Close closes every session at once and cancels the context of the
// handlers in flight, then returns.
func TestCloseCancelsHandlers(t *testing.T) {
	t.Parallel()
	g := newGatedHandler(2)
	rec := newRecorder()
	srv := newTestServer(g)
	rec.attach(srv)
	addr := RunLocalServer(t, srv)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	rec.next(t)
	c.send(smpp.CmdSubmitSM, submitBody("stuck"))
	g.waitStarted(t, 1)

	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	awaitErrOr(t, closed, nil, "Close()", "Close did not return with a handler waiting on its context", g.abort)
	c.expectClosed("session after Close")
	if ev := rec.next(t); ev.up || ev.reason != ReasonServerShutdown {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonServerShutdown)
	}
	expectRefused(t, addr)
}

// drainUntilClosed reads whatever the server still sends (an unbind, say)
// until it closes the connection.
func drainUntilClosed(t *testing.T, c *esme, what string) {
	t.Helper()
	for {
		_, _, err := c.tryRead(ioTimeout)
		if err == nil {
			continue
		}
		if !isClosedErr(err) {
			t.Fatalf("%s: read error %v, want the connection closed", what, err)
		}
		return
	}
}

// expectRefused checks that nothing serves addr any more.
func expectRefused(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return
	}
	defer conn.Close()
	c := newESME(t, conn)
	c.send(smpp.CmdEnquireLink, nil)
	c.expectClosed("new connection after the server closed")
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
