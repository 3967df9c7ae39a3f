package proxytest

import (
	"context"
	"sync"
)

// Forwarder is a configurable fake of dedup.Forwarder in the spirit of
// franz-go's kfake: every call is counted and answered by the hook Answer.
// Instantiate it with the attempt and result types,
// Forwarder[*dedup.Attempt, dedup.Result]; it does not import dedup so
// that dedup's own tests can use it.
type Forwarder[A any, R any] struct {
	// Answer answers the n-th call (from 1). A nil Answer returns the zero
	// R.
	Answer func(ctx context.Context, n int, a A) R

	mu    sync.Mutex
	calls int
}

// Forward counts the call and returns what Answer says.
func (f *Forwarder[A, R]) Forward(ctx context.Context, a A) R {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if f.Answer == nil {
		var zero R
		return zero
	}
	return f.Answer(ctx, n, a)
}

// Calls is the number of Forward calls so far.
func (f *Forwarder[A, R]) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}
