// Package testkit holds the helpers the project's tests share, so that
// each is written once: Eventually, the one poll with a deadline;
// Goroutines/CheckLeaks, the one goroutine-leak check (in the spirit of
// tailscale's tstest); Clock, the hand-moved clock; LogLines and Buffer for
// log capture; CA, a throw-away certificate authority; Serve, an accept
// loop that cleans up after itself; Gate, which holds a fake's writes
// while a test wants; and Get/Do, an HTTP request with its body read. It imports no project package
// and is imported only by tests.
package testkit

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// pollEvery bounds the interval between two looks at a condition: the
// first looks come fast (a condition often holds at once), later ones
// every pollEvery.
const pollEvery = 10 * time.Millisecond

// Poll calls cond, backing off from 1ms to pollEvery, until it holds
// (true) or timeout has passed (false). It never sleeps past the deadline
// by more than one interval.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return cond()
		}
		t := time.NewTimer(min(wait, time.Until(deadline)+time.Millisecond))
		<-t.C
		wait = min(2*wait, pollEvery)
	}
	return true
}

// Eventually waits until cond holds, looking again every few
// milliseconds, and fails the test with msg if it still does not after
// timeout. It is the way to wait for something another goroutine does
// when no event announces it; it never decides by time alone. Call it
// from the test's goroutine (it calls t.Fatalf).
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("%s (not within %v)", msg, timeout)
	}
}

// Goroutines is a count of the process's goroutines taken before the code
// under test starts some. Tests that count goroutines must not run in
// parallel with others.
type Goroutines struct{ n int }

// CountGoroutines takes the count now.
func CountGoroutines() Goroutines { return Goroutines{runtime.NumGoroutine()} }

// Count is the number counted.
func (g Goroutines) Count() int { return g.n }

// Settle waits up to timeout for the process to run at most slack
// goroutines more than counted, and returns the last count and whether it
// settled.
func (g Goroutines) Settle(timeout time.Duration, slack int) (int, bool) {
	n := 0
	ok := Poll(timeout, func() bool {
		n = runtime.NumGoroutine()
		return n <= g.n+slack
	})
	return n, ok
}

// Check fails the test, with the stack of every goroutine, if more than
// slack goroutines beyond the count are still running after timeout.
func (g Goroutines) Check(t testing.TB, timeout time.Duration, slack int) {
	t.Helper()
	if n, ok := g.Settle(timeout, slack); !ok {
		t.Errorf("goroutine leak: %d goroutines after the test, %d before (+%d allowed)\n%s", n, g.n, slack, Stacks())
	}
}

// CheckLeaks counts the goroutines now and, when the test ends, fails it
// if any started since are still running after timeout. Call it first in
// the test, so that its cleanup runs after every other one.
func CheckLeaks(t testing.TB, timeout time.Duration) {
	t.Helper()
	g := CountGoroutines()
	t.Cleanup(func() { g.Check(t, timeout, 0) })
}

// Stacks is the stack of every goroutine of the process.
func Stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// LeftRunning waits up to timeout for every goroutine whose stack
// mentions match (a function, as "esme.(*Client)") to end, and returns the
// stacks of those still running, "" when none is. It suits TestMain, which
// has no test to fail and runs among the testing package's goroutines.
func LeftRunning(timeout time.Duration, match string) string {
	var left []string
	Poll(timeout, func() bool {
		left = left[:0]
		for _, g := range strings.Split(Stacks(), "\n\n") {
			if strings.Contains(g, match) {
				left = append(left, g)
			}
		}
		return len(left) == 0
	})
	return strings.Join(left, "\n\n")
}
