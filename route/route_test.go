package route

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

func TestTemporaryErrorsAreRetriedWithinBounds(t *testing.T) {
	tests := map[string]struct {
		statuses  []smpp.Status
		attempts  int
		budget    time.Duration
		wantCalls int
		want      smpp.Status
	}{
		"0x14 twice then accepted":  {[]smpp.Status{0x14, 0x14, 0}, 3, 0, 3, 0},
		"0x58 forever, 3 attempts":  {[]smpp.Status{0x58, 0x58, 0x58, 0x58, 0x58}, 3, 0, 3, 0x58},
		"permanent error at once":   {[]smpp.Status{smpp.StatusInvDstAdr, 0}, 3, 0, 1, smpp.StatusInvDstAdr},
		"budget too small":          {[]smpp.Status{0x08, 0}, 5, time.Nanosecond, 1, 0x08},
		"attempts 1 means no retry": {[]smpp.Status{0x64, 0}, 1, 0, 1, 0x64},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			up := &fakeUp{name: "a", up: 1, status: func(n int) smpp.Status { return tc.statuses[n-1] }}
			var pauses []time.Duration
			r := New(Config{
				Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1, Attempts: tc.attempts, Budget: tc.budget}}},
				Backoff: func(n int) time.Duration {
					d := time.Duration(n) * time.Millisecond
					pauses = append(pauses, d)
					return d
				},
				Sleep: noSleep,
			})
			var j []string
			res := r.Forward(context.Background(), attempt(t, &j))
			if res.Kind != dedup.Answered || res.Status != tc.want || up.calls != tc.wantCalls {
				t.Errorf("Forward = kind %d status %v after %d calls, want answered %v after %d", res.Kind, res.Status, up.calls, tc.want, tc.wantCalls)
			}
			if len(j) != tc.wantCalls {
				t.Errorf("journal entries = %d, want one per write (%d)", len(j), tc.wantCalls)
			}
		})
	}
}

func TestRetryPrefersAnotherUpstream(t *testing.T) {
	a := &fakeUp{name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusMsgQFul }}
	b := &fakeUp{name: "b", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1000000, Attempts: 3}, {Upstream: b, Weight: 1}}}, Sleep: noSleep})
	var j []string
	res := r.Forward(context.Background(), attempt(t, &j))
	if res.Status != 0 || res.Upstream != "b" {
		t.Errorf("Forward = %v via %q, want accepted via b after a's 0x14", res.Status, res.Upstream)
	}
}

func TestValidityDeadlineStopsRetries(t *testing.T) {
	up := &fakeUp{name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusThrottled }}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1, Attempts: 10}}}, Sleep: noSleep,
		Backoff: func(int) time.Duration { return time.Second }})
	var j []string
	at := attempt(t, &j)
	at.Deadline = time.Now().Add(500 * time.Millisecond)
	res := r.Forward(context.Background(), at)
	if up.calls != 1 || res.Status != smpp.StatusThrottled {
		t.Errorf("calls = %d status %v, want 1 call (the next would start after the validity period)", up.calls, res.Status)
	}
}

func TestOutcomeClassification(t *testing.T) {
	tests := map[string]struct {
		err      error
		wantKind dedup.ResultKind
		wantSt   smpp.Status
	}{
		"no session":   {smppclient.ErrNotSent, dedup.NotSent, smpp.StatusSysErr},
		"busy":         {errBusy(), dedup.NotSent, smpp.StatusThrottled},
		"timeout":      {smppclient.ErrTimeout, dedup.Ambiguous, 0},
		"session lost": {smppclient.ErrSessionLost, dedup.Ambiguous, 0},
	}
	for name, tc := range tests {
		up := &fakeUp{name: "a", up: 1, err: tc.err}
		r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1}}}, Sleep: noSleep})
		var j []string
		res := r.Forward(context.Background(), attempt(t, &j))
		if res.Kind != tc.wantKind || res.Status != tc.wantSt {
			t.Errorf("%s: Forward = kind %d status %v, want kind %d status %v", name, res.Kind, res.Status, tc.wantKind, tc.wantSt)
		}
	}
}

func TestWeightsAndBackups(t *testing.T) {
	a := &fakeUp{name: "a", up: 1}
	b := &fakeUp{name: "b", up: 1}
	bk := &fakeUp{name: "backup", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 3}, {Upstream: b, Weight: 1}, {Upstream: bk, Weight: 0}}}})
	counts := map[string]int{}
	for range 4000 {
		m, _ := r.Pick("shop", smpp.Segment{}, "", nil)
		counts[m.Upstream.Name()]++
	}
	if counts["backup"] != 0 || counts["a"] < 2700 || counts["a"] > 3300 {
		t.Errorf("picks = %v, want about 3000:1000 and no backup", counts)
	}
	a.up, b.up = 0, 0
	if m, _ := r.Pick("shop", smpp.Segment{}, "", nil); m.Upstream.Name() != "backup" {
		t.Errorf("with every weighted upstream down, Pick = %s, want backup", m.Upstream.Name())
	}
	a.up, b.up = 1, 1
	seg := smpp.Segment{Total: 3, Seq: 1}
	first, _ := r.Pick("shop", seg, "msg-1", nil)
	for i := range 50 {
		seg.Seq = uint8(i%3 + 1)
		if m, _ := r.Pick("shop", seg, "msg-1", nil); m.Upstream.Name() != first.Upstream.Name() {
			t.Fatalf("segments of one message went to %s and %s", first.Upstream.Name(), m.Upstream.Name())
		}
	}
}

// The retry budget and the validity period are measured on the injected
// clock: a test advances it in Sleep instead of waiting.
func TestRetryLimitsFollowTheInjectedClock(t *testing.T) {
	tests := map[string]struct {
		budget    time.Duration
		validity  time.Duration // from the clock's start; 0 = none
		wantCalls int
	}{
		// pauses of 100ms: retries start at 100ms and 200ms; the next
		// would end at 300ms, past the budget.
		"retry budget 250ms": {budget: 250 * time.Millisecond, wantCalls: 3},
		// the second try starts at 100ms; the third would start at 200ms,
		// past the validity period.
		"validity period 150ms": {validity: 150 * time.Millisecond, wantCalls: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			up := &fakeUp{name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusThrottled }}
			r := New(Config{
				Routes:  map[string][]Member{"shop": {{Upstream: up, Weight: 1, Attempts: 10, Budget: tc.budget}}},
				Backoff: func(int) time.Duration { return 100 * time.Millisecond },
				Sleep:   func(_ context.Context, d time.Duration) { clock.Advance(d) },
				Now:     clock.Now,
			})
			var j []string
			at := attempt(t, &j)
			if tc.validity > 0 {
				at.Deadline = clock.Now().Add(tc.validity)
			}
			res := r.Forward(context.Background(), at)
			if up.calls != tc.wantCalls || res.Status != smpp.StatusThrottled {
				t.Errorf("calls = %d status %v, want %d calls answered 0x58", up.calls, res.Status, tc.wantCalls)
			}
		})
	}
}
