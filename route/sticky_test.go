package route

import (
	"context"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// A segment that meets a temporary error is retried on its message's
// upstream (SPEC §6: segments stay on it while it has a bound session),
// not on another member of the route.
func TestSegmentRetriesStayOnTheMessageUpstream(t *testing.T) {
	a := &fakeUp{name: "a", up: 1, status: func(n int) smpp.Status {
		if n == 2 {
			return smpp.StatusMsgQFul // the second segment's first try
		}
		return smpp.StatusOK
	}}
	b := &fakeUp{name: "b", up: 0}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1, Attempts: 3}, {Upstream: b, Weight: 1_000_000}}}, Sleep: noSleep})
	if up, _ := journaled(t, r, "447700", 1); up != "a" {
		t.Fatalf("segment 1 went to %s, want a (b is down)", up)
	}
	b.up = 1
	up, writes := journaled(t, r, "447700", 2)
	if up != "a" || len(writes) != 2 || writes[0] != "a" || writes[1] != "a" {
		t.Errorf("segment 2 after a 0x14 on a: answered via %s, written to %v; want a, [a a]", up, writes)
	}
}

// An upstream cooling down after repeated failures still takes the later
// segments of the messages it already carries while it has a bound
// session.
func TestSegmentStaysOnItsUpstreamWhileItCoolsDown(t *testing.T) {
	clock := newClock()
	a := &fakeUp{name: "a", up: 1, status: func(n int) smpp.Status {
		if n == 2 {
			return smpp.StatusXTAppn
		}
		return smpp.StatusOK
	}}
	b := &fakeUp{name: "b", up: 0}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}, {Upstream: b, Weight: 1}}},
		Now: clock.Now, FailThreshold: 1, Sleep: noSleep})
	if up, _ := journaled(t, r, "447701", 1); up != "a" {
		t.Fatalf("segment 1 went to %s, want a (b is down)", up)
	}
	b.up = 1
	if up, _ := journaled(t, r, "447701", 2); up != "a" {
		t.Fatalf("segment 2 went to %s, want a", up)
	}
	if r.Healthy("a") {
		t.Fatalf("a is healthy after a failure with FailThreshold 1")
	}
	if up, writes := journaled(t, r, "447701", 3); up != "a" || len(writes) != 1 {
		t.Errorf("segment 3 while a cools down: via %s, written to %v; want a, once", up, writes)
	}
}

// A segment sent elsewhere while its message's upstream had no bound
// session does not move the message: once that upstream is back, the
// later segments go to it again.
func TestRememberedUpstreamOfAMessageIsNotRewritten(t *testing.T) {
	a := &fakeUp{name: "a", up: 1}
	b := &fakeUp{name: "b", up: 0}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}, {Upstream: b, Weight: 1}}}, Sleep: noSleep})
	if up, _ := journaled(t, r, "447702", 1); up != "a" {
		t.Fatalf("segment 1 went to %s, want a (b is down)", up)
	}
	a.up, b.up = 0, 1
	if up, _ := journaled(t, r, "447702", 2); up != "b" {
		t.Fatalf("segment 2 went to %s while a was down, want b", up)
	}
	a.up = 1
	if up, _ := journaled(t, r, "447702", 3); up != "a" {
		t.Errorf("segment 3 after a came back went to %s, want a (the message's upstream)", up)
	}
}

// The bind a message's segments use may change within its upstream (the
// remembered bind dropped): the memory follows the bind, not another
// upstream.
func TestRememberedBindFollowsANewBindOfTheSameUpstream(t *testing.T) {
	a := &fakeBinds{fakeUp: fakeUp{name: "a", up: 1}, sessions: []string{"a/1"}}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}}}})
	first := r.Forward(context.Background(), segmentAttempt(t, "447703", 7, 1))
	a.mu2.Lock()
	a.sessions = []string{"a/2", "a/3"}
	a.mu2.Unlock()
	second := r.Forward(context.Background(), segmentAttempt(t, "447703", 7, 2))
	third := r.Forward(context.Background(), segmentAttempt(t, "447703", 7, 3))
	if first.Session != "a/1" || second.Session == "a/1" || third.Session != second.Session {
		t.Errorf("segments on binds %s, %s, %s; want a/1, then one new bind for the rest", first.Session, second.Session, third.Session)
	}
}
