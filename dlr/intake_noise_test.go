package dlr

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// Warnings about what one upstream delivers — malformed deliver_sm,
// receipts that match no record — are logged once per interval per
// upstream and kind, with the count held back; every PDU is still handled
// and counted.
func TestPerPDUIntakeWarningsAreRateLimited(t *testing.T) {
	tests := map[string]struct {
		msg     string
		frame   func(i int) []byte
		outcome string
	}{
		"malformed deliver_sm": {
			msg:     "dlr: malformed deliver_sm from upstream",
			frame:   func(i int) []byte { return smpp.EncodeSimple(smpp.CmdDeliverSM, 0, uint32(i+1), []byte{0}) },
			outcome: OutMalformed,
		},
		"unmatched receipts": {
			msg:     "dlr: receipt matches no record; kept",
			frame:   func(i int) []byte { return dlrFrame(fmt.Sprint(900+i), "DELIVRD") },
			outcome: OutUnmatched,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lines := testkit.NewLogLines()
			clock := newClock()
			e := newEnv(t, func(c *Config) { c.Logger, c.Now = slog.New(lines), clock.Now })
			for i := range 30 {
				e.deliver(t, tc.frame(i))
			}
			if got := e.svc.Count(tc.outcome); got != 30 {
				t.Fatalf("Count(%s) = %d, want 30", tc.outcome, got)
			}
			if n, _ := lines.Count(tc.msg); n != 1 {
				t.Errorf("%d lines %q for 30 PDUs within one interval, want 1", n, tc.msg)
			}
			clock.Advance(time.Minute)
			e.deliver(t, tc.frame(30))
			if n, sup := lines.Count(tc.msg); n != 2 || sup != 29 {
				t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2, 29", n, sup)
			}
		})
	}
}
