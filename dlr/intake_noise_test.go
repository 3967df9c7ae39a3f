package dlr

import (
	"errors"
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

// Lines logged per PDU when the store refuses what an upstream delivers
// (a receipt, an MO: each retry of the upstream's is refused again) or
// when an ESME refuses deliver_sm (an overloaded client refuses every
// one) are rate-limited the same way: one per interval per upstream or
// account and kind, with the count held back. They were one line each
// (from review).
func TestStoreAndESMERefusalsAreLoggedOncePerInterval(t *testing.T) {
	tests := map[string]struct {
		msg  string
		prep func(t *testing.T, e *env)
		pdu  func(t *testing.T, e *env, i int)
	}{
		"store refused a receipt": {
			msg: "dlr: store refused a receipt; upstream answered ESME_RSYSERR",
			prep: func(t *testing.T, e *env) {
				for i := range 31 {
					e.accepted(t, "shop", fmt.Sprint("k", i), fmt.Sprintf("%x", 900+i))
				}
				e.st.FailWrites(errors.New("disk full"))
			},
			pdu: func(t *testing.T, e *env, i int) { e.deliver(t, dlrFrame(fmt.Sprint(900+i), "DELIVRD")) },
		},
		"store refused an MO": {
			msg:  "dlr: store refused an MO; upstream answered ESME_RSYSERR",
			prep: func(t *testing.T, e *env) { e.st.FailWrites(errors.New("disk full")) },
			pdu:  func(t *testing.T, e *env, i int) { e.deliver(t, moFrame("4470")) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lines := testkit.NewLogLines()
			clock := newClock()
			e := newEnv(t, func(c *Config) {
				c.Logger, c.Now = slog.New(lines), clock.Now
				c.DefaultAccount = "shop"
			})
			tc.prep(t, e)
			for i := range 30 {
				tc.pdu(t, e, i)
			}
			if n, _ := lines.Count(tc.msg); n != 1 {
				t.Errorf("%d lines %q for 30 PDUs within one interval, want 1", n, tc.msg)
			}
			clock.Advance(time.Minute)
			tc.pdu(t, e, 30)
			if n, sup := lines.Count(tc.msg); n != 2 || sup != 29 {
				t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2, 29", n, sup)
			}
		})
	}
}

// An ESME that refuses every deliver_sm (0x58) gets each receipt again
// after dlr_redelivery; the refusals are logged once per interval per
// account.
func TestRefusedDeliveriesAreLoggedOncePerInterval(t *testing.T) {
	const msg = "dlr: ESME refused a deliver_sm; redelivery after dlr_redelivery"
	lines := testkit.NewLogLines()
	e := newEnv(t, func(c *Config) { c.Logger = slog.New(lines) })
	queueReceipts(t, e, 20)
	rx := &fakeRx{id: "s", answer: func(n int) (smpp.Status, error) { return smpp.StatusThrottled, nil }}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "20 refusals", func() bool { return e.svc.Count(DelRefused) >= 20 })
	if n, _ := lines.Count(msg); n != 1 {
		t.Errorf("%d lines %q for %d refusals within one interval, want 1", n, msg, e.svc.Count(DelRefused))
	}
}
