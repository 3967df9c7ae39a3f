package smppserver

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// ClosedCounts counts every ended session by reason, including the ones
// that never bound (for the sessions_closed_total metric).
func TestClosedCountsIncludeUnboundSessions(t *testing.T) {
	srv, addr := startServer(t, nil, func(s *Server) { s.BindTimeout = 150 * time.Millisecond })

	idle := dialESME(t, addr) // never binds
	idle.expectClosed("unbound session at bind_timeout")
	bad := dialESME(t, addr)
	if h, _ := bad.bind(smpp.CmdBindTransceiver, "shop", "wrong"); h.Status != smpp.StatusBindFail {
		t.Fatalf("bind with a wrong password = %v, want 0x0D", h.Status)
	}
	bad.expectClosed("failed bind")
	good := dialBound(t, addr, smpp.CmdBindTransceiver)
	seq := good.send(smpp.CmdUnbind, nil)
	good.expect("unbind", smpp.CmdUnbind|smpp.RespBit, seq, smpp.StatusOK)
	good.expectClosed("unbound by the ESME")

	want := map[CloseReason]uint64{ReasonBindTimeout: 1, ReasonBindFailed: 1, ReasonUnbind: 1}
	waitFor(t, "close counts", func() bool {
		got := srv.ClosedCounts()
		for r, n := range want {
			if got[r] != n {
				return false
			}
		}
		return true
	})
	if got := srv.ClosedCounts()[ReasonKicked]; got != 0 {
		t.Errorf("ClosedCounts()[kicked] = %d, want 0", got)
	}
}
