package smppserver

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// answerPipelined sends n submits back to back, so that several handlers
// run at once, and reads their n answers.
func answerPipelined(t *testing.T, c *esme, n int) {
	t.Helper()
	for range n {
		c.send(smpp.CmdSubmitSM, submitBody("hello"))
	}
	for range n {
		if h, _ := c.read(); h.ID != smpp.CmdSubmitSM|smpp.RespBit || h.Status != smpp.StatusOK {
			t.Fatalf("answer %s, want submit_sm_resp OK", fmtHeader(h))
		}
	}
}

// A session keeps the goroutines that ran its handlers for its next
// requests; once the session ends, none of them is left, though they had
// answered and were only waiting (and would wait far longer for work).
func TestIdleHandlerGoroutinesEndWithTheirSession(t *testing.T) {
	srv, addr := startServer(t, okHandler, func(s *Server) { s.handlerIdle = time.Hour })
	baseline := testkit.CountGoroutines()

	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	answerPipelined(t, c, 10)
	c.submit("a request after the others were answered", smpp.StatusOK)

	s := sessionOf(t, srv, c)
	_ = c.conn.Close()
	waitClosed(t, s)
	baseline.Check(t, ioTimeout, 0)
}

// A session that goes quiet keeps no handler goroutine: each ends once it
// has waited the idle time for a request, while the session stays bound
// and answers the next request as before.
func TestQuietSessionKeepsNoHandlerGoroutine(t *testing.T) {
	_, addr := startServer(t, okHandler, func(s *Server) { s.handlerIdle = 10 * time.Millisecond })
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	c.submit("first request", smpp.StatusOK)
	bound := testkit.CountGoroutines() // the session's own goroutines, at most one handler
	answerPipelined(t, c, 10)
	bound.Check(t, ioTimeout, 0)
	c.submit("a request once the session was quiet", smpp.StatusOK)
}
