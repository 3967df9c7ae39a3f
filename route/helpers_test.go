package route

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/smppclient"
)

// within5Sigma reports whether got is within 5 standard deviations of
// Binomial(n, p)'s mean (a false failure has probability below 1e-6).
func within5Sigma(got, n int, p float64) bool {
	mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	return math.Abs(float64(got)-mean) <= 5*sd
}

// fakeBinds is an upstream with several binds that records which bind each
// submit preferred and answers on that bind.
type fakeBinds struct {
	fakeUp
	sessions []string
	mu2      sync.Mutex
	prefers  []string
}

func (f *fakeBinds) Sessions() []smppclient.SessionInfo {
	f.mu2.Lock()
	defer f.mu2.Unlock()
	var out []smppclient.SessionInfo
	for _, id := range f.sessions {
		out = append(out, smppclient.SessionInfo{ID: id, State: smppclient.StateBound, Bind: smpp.BindTransceiver})
	}
	return out
}

func (f *fakeBinds) Submit(ctx context.Context, prefer string, build func(uint32) []byte, before func(string, uint32) error) (smppclient.Response, error) {
	f.mu2.Lock()
	f.prefers = append(f.prefers, prefer)
	sess := prefer
	if sess == "" {
		sess = f.sessions[len(f.prefers)%len(f.sessions)]
	}
	f.mu2.Unlock()
	if err := before(sess, 1); err != nil {
		// As smppclient: nothing written, the session and sequence known.
		return smppclient.Response{Session: sess, Sequence: 1}, fmt.Errorf("%w: %w", smppclient.ErrNotSent, err)
	}
	return smppclient.Response{Status: 0, MessageID: "id", Session: sess, Sequence: 1}, nil
}

func segmentAttempt(t *testing.T, dst string, ref uint8, part uint8) *dedup.Attempt {
	t.Helper()
	f := smpptest.SubmitFields{Src: "S", Dst: dst, EsmClass: 0x40, ShortMessage: []byte{0x05, 0x00, 0x03, ref, 3, part, 'x'}}
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, f))
	if err != nil {
		t.Fatal(err)
	}
	return &dedup.Attempt{Account: "shop", Key: "k", Submit: s, Segment: s.Segment(), Journal: func(string, string, uint32) error { return nil }}
}

// fullUp is an upstream whose every bind is at its window: Submit waits
// route_wait (here: returns at once) and fails with ErrBusy.
type fullUp struct {
	fakeBinds
	full bool
}

func (f *fullUp) Sessions() []smppclient.SessionInfo {
	out := f.fakeBinds.Sessions()
	for i := range out {
		out[i].Window = 2
		if f.full {
			out[i].InFlight = 2
		}
	}
	return out
}

func (f *fullUp) Submit(ctx context.Context, prefer string, build func(uint32) []byte, before func(string, uint32) error) (smppclient.Response, error) {
	if f.full {
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		return smppclient.Response{}, errBusy()
	}
	return f.fakeBinds.Submit(ctx, prefer, build, before)
}

type fakeUp struct {
	name   string
	up     int
	mu     sync.Mutex
	calls  int
	status func(n int) smpp.Status
	err    error
}

func (f *fakeUp) Name() string { return f.name }

func (f *fakeUp) Up() int { return f.up }

func (f *fakeUp) Submit(_ context.Context, _ string, build func(uint32) []byte, before func(string, uint32) error) (smppclient.Response, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if err := before(f.name+"/s", uint32(n)); err != nil {
		return smppclient.Response{}, err
	}
	_ = build(uint32(n))
	if f.err != nil {
		return smppclient.Response{Session: f.name + "/s", Sequence: uint32(n)}, f.err
	}
	st := smpp.StatusOK
	if f.status != nil {
		st = f.status(n)
	}
	return smppclient.Response{Status: st, MessageID: f.name + "-id", Session: f.name + "/s", Sequence: uint32(n)}, nil
}

func attempt(t *testing.T, journal *[]string) *dedup.Attempt {
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, smpptest.SubmitFields{Dst: "1", ShortMessage: []byte("x")}))
	if err != nil {
		t.Fatal(err)
	}
	return &dedup.Attempt{Account: "shop", Key: "k", Submit: s, Journal: func(up, sess string, seq uint32) error {
		*journal = append(*journal, up)
		return nil
	}}
}

func noSleep(context.Context, time.Duration) {}

type busyErr struct{}

func (busyErr) Error() string { return "busy" }

func (busyErr) Is(target error) bool {
	return target == smppclient.ErrNotSent || target == smppclient.ErrBusy
}

func errBusy() error { return busyErr{} }

// journaled forwards a segment and returns the result and the upstreams
// written to, in order.
func journaled(t *testing.T, r *Router, dst string, part uint8) (string, []string) {
	t.Helper()
	a := segmentAttempt(t, dst, 7, part)
	var writes []string
	a.Journal = func(up, _ string, _ uint32) error { writes = append(writes, up); return nil }
	res := r.Forward(context.Background(), a)
	return res.Upstream, writes
}

// newClock is a hand-moved clock standing at a fixed time.
func newClock() *testkit.Clock { return testkit.NewClock(time.Unix(1000, 0)) }
