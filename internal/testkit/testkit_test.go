package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// Eventually returns as soon as the condition holds, having looked again
// after it first failed.
func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	Eventually(t, time.Minute, func() bool { return looks.Add(1) >= 3 }, "three looks")
	if n := looks.Load(); n != 3 {
		t.Errorf("cond called %d times, want 3 (stop at the first true)", n)
	}
}

// A condition that never holds is reported as a failure, not waited for
// forever.
func TestPollGivesUpAtTheDeadline(t *testing.T) {
	looks := 0
	if poll(5*time.Millisecond, func() bool { looks++; return false }) {
		t.Fatal("poll() = true for a condition that never holds")
	}
	if looks < 2 {
		t.Errorf("cond called %d times, want it looked at again before giving up", looks)
	}
}

// A goroutine started after the count and still running is a leak; once
// it ends, the count settles.
func TestGoroutinesSeesALeakUntilItEnds(t *testing.T) {
	g := CountGoroutines()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { <-stop; close(done) }()
	if n, ok := g.Settle(0, 0); ok {
		t.Fatalf("Settle() = %d, true with a goroutine still running; want false", n)
	}
	close(stop)
	<-done
	if n, ok := g.Settle(time.Minute, 0); !ok {
		t.Fatalf("Settle() = %d, false after the goroutine ended (count before %d)", n, g.Count())
	}
}
