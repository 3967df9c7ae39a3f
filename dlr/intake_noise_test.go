package dlr

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// lineCounter is a slog.Handler counting records by message and keeping
// the "suppressed" attribute of the last one of each.
type lineCounter struct {
	mu         sync.Mutex
	n          map[string]int
	suppressed map[string]int64
}

func (h *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineCounter) WithGroup(string) slog.Handler            { return h }
func (h *lineCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	h.suppressed[r.Message] = 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			h.suppressed[r.Message] = a.Value.Int64()
		}
		return true
	})
	return nil
}

func (h *lineCounter) count(msg string) (int, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg], h.suppressed[msg]
}

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

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
			lines := &lineCounter{n: map[string]int{}, suppressed: map[string]int64{}}
			clock := &stepClock{t: time.Now()}
			e := newEnv(t, func(c *Config) { c.Logger, c.Now = slog.New(lines), clock.Now })
			for i := range 30 {
				e.deliver(t, tc.frame(i))
			}
			if got := e.svc.Count(tc.outcome); got != 30 {
				t.Fatalf("Count(%s) = %d, want 30", tc.outcome, got)
			}
			if n, _ := lines.count(tc.msg); n != 1 {
				t.Errorf("%d lines %q for 30 PDUs within one interval, want 1", n, tc.msg)
			}
			clock.Add(time.Minute)
			e.deliver(t, tc.frame(30))
			if n, sup := lines.count(tc.msg); n != 2 || sup != 29 {
				t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2, 29", n, sup)
			}
		})
	}
}
