package smpp

import (
	"sync"
	"time"
)

// timers holds stopped timers for AcquireTimer.
var timers sync.Pool

// AcquireTimer returns a timer that fires after d, reused from those given
// back with ReleaseTimer: the SMPP clients wait for each response with one,
// and a request should not allocate it.
func AcquireTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// ReleaseTimer stops t and keeps it for reuse; t must not be used after.
// Since Go 1.23 a stopped timer's channel holds no stale value, so the
// next Reset starts clean whether or not t had fired.
func ReleaseTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
