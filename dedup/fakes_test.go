package dedup

import (
	"context"
	"errors"
	"fmt"

	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/smpp"
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
