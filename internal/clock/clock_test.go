package clock

import (
	"context"
	"testing"
	"time"
)

// sleeping runs Sleep(ctx, d) in a goroutine; the channel closes when it
// returns.
func sleeping(ctx context.Context, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		Sleep(ctx, d)
		close(done)
	}()
	return done
}

// returned reports whether done closed within a minute: far beyond any
// pause these tests let pass.
func returned(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-time.After(time.Minute):
		return false
	}
}

// A context that has already ended wakes Sleep at once, however long the
// pause asked for.
func TestSleepReturnsWhenTheContextIsAlreadyDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !returned(sleeping(ctx, 24*time.Hour)) {
		t.Fatal("Sleep(done ctx, 24h) did not return")
	}
}

// A pause of zero or less returns without waiting, even on a context
// that never ends.
func TestSleepOfNothingReturns(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if !returned(sleeping(context.Background(), d)) {
			t.Errorf("Sleep(%v) did not return", d)
		}
	}
}

// A short pause on a context that never ends returns once it has passed,
// not before.
func TestSleepReturnsAfterThePause(t *testing.T) {
	const d = 20 * time.Millisecond
	start := time.Now()
	if !returned(sleeping(context.Background(), d)) {
		t.Fatalf("Sleep(%v) did not return", d)
	}
	if took := time.Since(start); took < d {
		t.Errorf("Sleep(%v) returned after %v, before its pause had passed", d, took)
	}
}

// Cancelling the context wakes a Sleep that is waiting out a long pause,
// and nothing else does.
func TestSleepWokenByCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := sleeping(ctx, 24*time.Hour)
	select {
	case <-done:
		t.Fatal("Sleep(24h) returned before its context was cancelled")
	default:
	}
	cancel()
	if !returned(done) {
		t.Fatal("cancel did not wake Sleep(24h)")
	}
}
