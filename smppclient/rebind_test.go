package smppclient

import (
	"context"
	"sync"
	"testing"
	"time"
)

// An upstream that accepts every bind and drops the connection at once is
// redialled with growing back-off: each short-lived session counts as a
// failed attempt, so the back-off is asked for attempt 1, 2, 3, … — not
// for attempt 1 after every bind (which redialled every 0.25–0.5s).
func TestUpstreamThatDropsEveryBindIsRedialledWithGrowingBackoff(t *testing.T) {
	f := startFake(t)
	f.dropAfterBind = true
	attempts := make(chan int, 100)
	newPool(t, f.addr, func(c *Config) {
		c.Backoff = func(n int) time.Duration {
			select {
			case attempts <- n:
			default:
			}
			return time.Millisecond
		}
	})
	timeout := time.After(5 * time.Second)
	for want := 1; want <= 6; want++ {
		select {
		case got := <-attempts:
			if got != want {
				t.Fatalf("back-off asked for attempt %d after %d binds that dropped at once, want %d", got, want, want)
			}
		case <-timeout:
			t.Fatalf("only %d rebinds within 5s", want-1)
		}
	}
}

// testClock is a settable clock for the bind loops.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// Over 10 seconds of the bind loop's (injected) clock, an upstream that
// drops every bind at once is bound 5 or 6 times with the default back-off
// (500ms doubling, jittered to 50–100%: 0.25–0.5s, 0.5–1s, 1–2s, 2–4s,
// 4–8s), not 20 to 40 times.
func TestUpstreamThatDropsEveryBindIsBoundAFewTimesInTenSeconds(t *testing.T) {
	f := startFake(t)
	f.dropAfterBind = true
	clock := &testClock{t: time.Unix(1000, 0)}
	end := clock.Now().Add(10 * time.Second)
	parked := make(chan struct{})
	newPool(t, f.addr, func(c *Config) {
		c.Backoff = nil // the default
		c.Now = clock.Now
		c.Sleep = func(ctx context.Context, d time.Duration) {
			if clock.Add(d).Before(end) {
				return
			}
			close(parked) // the window is over: wait here until Close
			<-ctx.Done()
		}
	})
	select {
	case <-parked:
	case <-time.After(10 * time.Second):
		t.Fatalf("the injected clock did not reach 10s (%d binds so far)", f.binds.Load())
	}
	if n := f.binds.Load(); n < 5 || n > 6 {
		t.Errorf("%d binds within 10s of an upstream that drops every bind, want 5 or 6", n)
	}
}

// The back-off starts again from the first attempt only after a session
// stayed bound for StableAfter; sessions that end sooner keep it growing.
func TestRebindBackoffResetsOnlyAfterASessionStayedUp(t *testing.T) {
	f := startFake(t)
	clock := &testClock{t: time.Unix(1000, 0)}
	attempts := make(chan int, 10)
	p := newPool(t, f.addr, func(c *Config) {
		c.StableAfter = time.Minute
		c.Now = clock.Now
		c.Sleep = func(context.Context, time.Duration) {}
		c.Backoff = func(n int) time.Duration { attempts <- n; return time.Second }
	})
	drop := func(want int) {
		t.Helper()
		waitUp(t, p, 1)
		f.dropConns()
		select {
		case got := <-attempts:
			if got != want {
				t.Errorf("after the session dropped, back-off attempt %d, want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no rebind after the session dropped")
		}
	}
	drop(1)
	drop(2)
	waitUp(t, p, 1)
	clock.Add(59 * time.Second)
	drop(3) // up 59s: not stable
	waitUp(t, p, 1)
	clock.Add(time.Minute)
	drop(1) // up a minute: the back-off starts again
	drop(2)
}
