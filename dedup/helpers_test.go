package dedup

// The engine tests' fakes and builders: forwarders (scripted, journaling
// first, as the router does), a hand-moved clock, an engine on a memory
// store, and submit_sm frames.

import (
	"context"
	"errors"
	"fmt"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

// fakeFwd is proxytest's fake forwarder for the engine: Calls counts the
// forwards.
type fakeFwd = proxytest.Forwarder[*Attempt, Result]

// journaling is a fake forwarder that journals forward n as sequence n of
// session up/s1 on upstream up (a failed journal is not sent) and answers
// with answer(n).
func journaling(answer func(n int) Result) *fakeFwd {
	return &fakeFwd{Answer: func(_ context.Context, n int, a *Attempt) Result {
		if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
		}
		return answer(n)
	}}
}

// accepting accepts forward n with message id m<n>; after, when set, runs
// between the journal and the answer.
func accepting(after func(n int)) *fakeFwd {
	return journaling(func(n int) Result {
		if after != nil {
			after(n)
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: fmt.Sprintf("m%d", n), Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
	})
}

// scripted answers forward n with script(n), sent on up/s1 as sequence n.
func scripted(script func(n int) Result) *fakeFwd {
	return journaling(func(n int) Result {
		r := script(n)
		r.Upstream, r.Session, r.Sequence = "up", "up/s1", uint32(n)
		return r
	})
}

// timingOut answers every forward ambiguously (a response timeout).
func timingOut() *fakeFwd {
	return journaling(func(n int) Result {
		return Result{Kind: Ambiguous, Err: errors.New("response timeout"), Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
	})
}

// fakeForwarder answers from a script and counts forwards. It journals
// before "writing", as the real router does.
type fakeForwarder struct {
	mu      sync.Mutex
	calls   int
	sent    int // calls whose journal succeeded: written upstream
	answer  func(n int) Result
	release chan struct{} // if non-nil, Forward blocks until closed
	written chan struct{} // if non-nil, closed at the first "write" (after the journal)
	ids     atomic.Int64
}

func (f *fakeForwarder) Forward(ctx context.Context, a *Attempt) Result {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
		return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err}
	}
	f.mu.Lock()
	f.sent++
	f.mu.Unlock()
	if f.written != nil && n == 1 {
		close(f.written)
	}
	if f.release != nil {
		<-f.release
	}
	if f.answer != nil {
		r := f.answer(n)
		r.Upstream, r.Session, r.Sequence = "up", "up/s1", uint32(n)
		return r
	}
	return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: fmt.Sprintf("m%d", f.ids.Add(1)), Upstream: "up"}
}

// count is the number of forwards written upstream (journaled first).
func (f *fakeForwarder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// firstThen is a fakeForwarder script: the first forward is answered with
// first, every later one with then.
func firstThen(first, then Result) func(n int) Result {
	return func(n int) Result {
		if n == 1 {
			return first
		}
		return then
	}
}

// clock is the tests' hand-moved clock.
type clock = testkit.Clock

// newClock is a clock standing at the tests' usual start.
func newClock() *clock { return testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) }

func newEngine(t *testing.T, f *fakeForwarder) (*Engine, *state.MemStore, *clock) {
	t.Helper()
	c := newClock()
	st := state.NewMem(c.Now)
	return newTestEngine(t, Config{Store: st, Forwarder: f, Now: c.Now, InstanceID: "test"}), st, c
}

// newTestEngine returns New(cfg), closed when the test ends.
func newTestEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e := New(cfg)
	t.Cleanup(e.Close)
	return e
}

func submit(t testing.TB, key, text string, extra ...smpp.TLV) *smpp.Submit {
	t.Helper()
	f := smpptest.SubmitFields{Src: "SHOP", Dst: "447700900123", ShortMessage: []byte(text)}
	if key != "" {
		f.TLVs = append(f.TLVs, smpp.TLV{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)})
	}
	f.TLVs = append(f.TLVs, extra...)
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, f))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var ctx = context.Background()
