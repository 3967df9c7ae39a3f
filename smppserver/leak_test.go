package smppserver

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// After Close, no goroutine of the server is left: not the accept loop,
// nor any session's reader, writer, handler, bind timer or pending request.
// Not parallel: it counts the process's goroutines.
func TestNoGoroutineLeakAfterClose(t *testing.T) {
	baseline := testkit.CountGoroutines()

	g := newGatedHandler(2) // a handler that waits on its context
	srv, addr := startServer(t, g, func(s *Server) { s.EnquireLink = 50 * time.Millisecond })

	unbound := dialESME(t, addr)
	unbound.expectOpen("unbound session")
	busy := dialBound(t, addr, smpp.CmdBindTransceiver)
	busy.send(smpp.CmdSubmitSM, submitBody("in flight"))
	g.waitStarted(t, 1)
	rx := dialBound(t, addr, smpp.CmdBindReceiver)
	pending := make(chan error, 1)
	go func() {
		_, err := sessionOf(t, srv, rx).Request(context.Background(), smpp.CmdDeliverSM, deliverBody("never answered"))
		pending <- err
	}()
	rx.read()
	for _, c := range []*esme{unbound, busy} {
		c.expectOpen("before Close")
	}

	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	awaitErrOr(t, closed, nil, "Close()", "Close did not return with a handler waiting on its context", g.abort)
	<-pending
	for _, c := range []*esme{unbound, busy, rx} {
		_ = c.conn.Close()
	}

	baseline.Check(t, ioTimeout, 0)
}
