package smppclient

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// Per-PDU warnings about what an upstream sends — responses nobody waits
// for, deliveries beyond the delivery window, requests the proxy does not
// support — are logged once per interval per upstream and kind, with the
// count of the lines held back, so a misbehaving SMSC cannot flood the log.
func TestPerPDUWarningsFromAnUpstreamAreRateLimited(t *testing.T) {
	tests := map[string]struct {
		msg   string
		setup func(t *testing.T, c *fakeConn, p *Pool)
		flood func(c *fakeConn, n int)
		count func(Stats) uint64
	}{
		"responses with unknown sequence numbers": {
			msg: "late or unmatched response dropped",
			flood: func(c *fakeConn, n int) {
				var b bytes.Buffer
				for i := range n {
					b.Write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, 0, uint32(5000+i), []byte("x\x00")))
				}
				c.write(b.Bytes())
			},
			count: func(s Stats) uint64 { return s.LateResponses },
		},
		"deliveries beyond the delivery window": {
			msg: "delivery refused: deliver_window full",
			setup: func(t *testing.T, c *fakeConn, p *Pool) { // one delivery fills the window (1)
				sendDeliverBurst(c, 99, 1)
				eventually(t, "a delivery running", func() bool { return p.Stats().Deliveries == 1 })
			},
			flood: func(c *fakeConn, n int) { sendDeliverBurst(c, 100, n) },
			count: func(s Stats) uint64 { return s.DeliverRefused },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := startFake(t)
			clock := &testClock{t: time.Unix(1000, 0)}
			lines := testkit.NewLogLines()
			release := make(chan struct{})
			p := newPool(t, f.addr, func(c *Config) {
				c.Logger = slog.New(lines)
				c.Now = clock.Now
				c.DeliverWindow = 1
				c.OnDeliver = func(ctx context.Context, _ Delivery) smpp.Status {
					select {
					case <-release:
					case <-ctx.Done():
					}
					return smpp.StatusOK
				}
			})
			t.Cleanup(func() { closeOnce(release) })
			waitUp(t, p, 1)
			if tc.setup != nil {
				tc.setup(t, f.lastConn(), p)
			}
			tc.flood(f.lastConn(), 30)
			eventually(t, "30 PDUs handled", func() bool { return tc.count(p.Stats()) == 30 })
			if n, _ := lines.Count(tc.msg); n != 1 {
				t.Errorf("%d lines %q for 30 PDUs within one interval, want 1", n, tc.msg)
			}
			clock.Add(time.Minute)
			tc.flood(f.lastConn(), 1)
			eventually(t, "the next PDU handled", func() bool { return tc.count(p.Stats()) == 31 })
			// The PDU is counted just before its warning is logged.
			eventually(t, "a line after the interval", func() bool { n, _ := lines.Count(tc.msg); return n >= 2 })
			if n, sup := lines.Count(tc.msg); n != 2 || sup != 29 {
				t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2 lines, suppressed=29", n, sup)
			}
		})
	}
}

// Requests the proxy does not support are each answered generic_nack, and
// logged once per interval.
func TestUnsupportedRequestsFromAnUpstreamAreLoggedOncePerInterval(t *testing.T) {
	f := startFake(t)
	lines := testkit.NewLogLines()
	clock := &testClock{t: time.Unix(1000, 0)}
	p := newPool(t, f.addr, func(c *Config) { c.Logger, c.Now = slog.New(lines), clock.Now })
	waitUp(t, p, 1)
	var b bytes.Buffer
	for i := range 30 {
		b.Write(smpp.EncodeSimple(0x00000099, 0, uint32(700+i), nil))
	}
	f.lastConn().write(b.Bytes())
	for range 30 {
		if h := recvFromClient(t, f); h.ID != smpp.CmdGenericNack || h.Status != smpp.StatusInvCmdID {
			t.Fatalf("unsupported request answered %+v, want generic_nack ESME_RINVCMDID", h)
		}
	}
	if n, _ := lines.Count("unsupported request from upstream"); n != 1 {
		t.Errorf("%d lines for 30 unsupported requests within one interval, want 1", n)
	}
}
