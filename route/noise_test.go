package route

import (
	"context"
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

// An upstream answering every submit with a temporary error does not make
// a log line per submit: the retry and give-up lines are logged once per
// interval per upstream and status, with the count held back.
func TestTemporaryErrorLinesAreRateLimited(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	lines := &lineCounter{n: map[string]int{}, suppressed: map[string]int64{}}
	up := &fakeUp{name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusThrottled }}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1, Attempts: 2}}},
		Sleep: noSleep, Now: clock.Now, Logger: slog.New(lines)})
	var j []string
	for range 30 {
		if res := r.Forward(context.Background(), attempt(t, &j)); res.Status != smpp.StatusThrottled {
			t.Fatalf("Forward = %v, want 0x58 after 2 attempts", res.Status)
		}
	}
	for _, msg := range []string{"temporary upstream error; retrying", "temporary upstream error; not retried"} {
		if n, _ := lines.count(msg); n != 1 {
			t.Errorf("%d lines %q for 30 submits within one interval, want 1", n, msg)
		}
	}
	clock.Add(time.Minute)
	r.Forward(context.Background(), attempt(t, &j))
	if n, sup := lines.count("temporary upstream error; retrying"); n != 2 || sup != 29 {
		t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2, 29", n, sup)
	}
}
