package route

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// An upstream answering every submit with a temporary error does not make
// a log line per submit: the retry and give-up lines are logged once per
// interval per upstream and status, with the count held back.
func TestTemporaryErrorLinesAreRateLimited(t *testing.T) {
	clock := newClock()
	lines := testkit.NewLogLines()
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
		if n, _ := lines.Count(msg); n != 1 {
			t.Errorf("%d lines %q for 30 submits within one interval, want 1", n, msg)
		}
	}
	clock.Advance(time.Minute)
	r.Forward(context.Background(), attempt(t, &j))
	if n, sup := lines.Count("temporary upstream error; retrying"); n != 2 || sup != 29 {
		t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2, 29", n, sup)
	}
}
