package route

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// A Pool is an Upstream that lists its binds: the router keeps segments on
// one bind of it.
var (
	_ Upstream      = (*smppclient.Pool)(nil)
	_ sessionLister = (*smppclient.Pool)(nil)
)

// Segment hashing is rendezvous hashing: weighted, and a member going down
// moves only the messages it had (a % total hash moved most of the others
// too, splitting messages whose segments straddled the change).
func TestSegmentHashingIsStableWhenMembersChange(t *testing.T) {
	a, b, c := &fakeUp{name: "a", up: 1}, &fakeUp{name: "b", up: 1}, &fakeUp{name: "c", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 3}, {Upstream: b, Weight: 1}, {Upstream: c, Weight: 1}}}})
	seg := smpp.Segment{Total: 2, Seq: 1}
	const n = 5000
	pickAll := func() []string {
		out := make([]string, n)
		for i := range out {
			m, _ := r.Pick("shop", seg, fmt.Sprintf("msg-%d", i), nil)
			out[i] = m.Upstream.Name()
		}
		return out
	}
	before := pickAll()
	counts := map[string]int{}
	for _, name := range before {
		counts[name]++
	}
	if !within5Sigma(counts["a"], n, 0.6) || !within5Sigma(counts["b"], n, 0.2) || !within5Sigma(counts["c"], n, 0.2) {
		t.Errorf("messages per upstream = %v of %d, want about 3:1:1 (5σ)", counts, n)
	}

	b.up = 0
	during := pickAll()
	moved := 0
	for i := range before {
		switch {
		case during[i] == "b":
			t.Fatalf("message %d went to b while b was down", i)
		case before[i] != "b" && during[i] != before[i]:
			moved++
		}
	}
	if moved > 0 {
		t.Errorf("b went down and %d messages of a and c moved, want none", moved)
	}
	b.up = 1
	for i, name := range pickAll() {
		if name != before[i] {
			t.Fatalf("after b came back message %d goes to %s, want %s as before", i, name, before[i])
		}
	}
}

// All segments of one message go to one bind, even when they are
// forwarded concurrently, before any of them reached a bind; different
// messages spread over the binds.
func TestSegmentsOfOneMessageShareOneBind(t *testing.T) {
	up := &fakeBinds{fakeUp: fakeUp{name: "a", up: 3}, sessions: []string{"a/1", "a/2", "a/3"}}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1}}}})
	used := map[string]bool{}
	for m := range 30 {
		dst := fmt.Sprintf("4477%04d", m)
		var wg sync.WaitGroup
		got := make([]string, 3)
		for p := range 3 {
			wg.Go(func() { got[p] = r.Forward(context.Background(), segmentAttempt(t, dst, uint8(m), uint8(p+1))).Session })
		}
		wg.Wait()
		if got[0] != got[1] || got[1] != got[2] || got[0] == "" {
			t.Errorf("message %d: segments on binds %v, want one bind", m, got)
		}
		used[got[0]] = true
	}
	if len(used) != 3 {
		t.Errorf("30 messages used binds %v, want all three", used)
	}
}

// Once a segment went to a bind, later segments of the message follow it
// there while that upstream is up — even when another upstream comes back
// and would win the hash now.
func TestLaterSegmentsFollowTheFirst(t *testing.T) {
	a := &fakeBinds{fakeUp: fakeUp{name: "a", up: 1}, sessions: []string{"a/1", "a/2"}}
	b := &fakeBinds{fakeUp: fakeUp{name: "b", up: 0}, sessions: []string{"b/1"}}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}, {Upstream: b, Weight: 1000}}}})
	moved := 0
	for m := range 20 {
		dst := fmt.Sprintf("4477%04d", m)
		b.up = 0
		first := r.Forward(context.Background(), segmentAttempt(t, dst, 7, 1))
		b.up = 1 // b is back, and weighs 1000 times more
		for p := uint8(2); p <= 3; p++ {
			res := r.Forward(context.Background(), segmentAttempt(t, dst, 7, p))
			if res.Upstream != first.Upstream || res.Session != first.Session {
				t.Errorf("message %d: segment %d went to %s %s, the first to %s %s", m, p, res.Upstream, res.Session, first.Upstream, first.Session)
			}
		}
		// A new message between the same addresses (another reference)
		// is free to go to b.
		if r.Forward(context.Background(), segmentAttempt(t, dst, 8, 1)).Upstream == "b" {
			moved++
		}
	}
	if moved == 0 {
		t.Errorf("no new message went to b once it was back")
	}
}

func TestStickyTableIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := stickyTable{ttl: time.Minute}
	for i := range stickyMax + 100 {
		tb.put(fmt.Sprint(i), "a", "s", now)
	}
	if n := tb.len(); n > stickyMax {
		t.Errorf("table holds %d messages, want at most %d", n, stickyMax)
	}
	if _, ok := tb.get("5", now.Add(30*time.Second)); !ok {
		t.Errorf("an entry is gone before its TTL")
	}
	if _, ok := tb.get("5", now.Add(2*time.Minute)); ok {
		t.Errorf("an entry outlived its TTL")
	}
	tb.put("new", "a", "s", now.Add(2*time.Minute))
	if n := tb.len(); n != 1 {
		t.Errorf("after the TTL the table holds %d messages, want only the new one", n)
	}
}

// An upstream that keeps failing (here: every response times out, an
// upstream bound but black-holing submits) is left out after
// FailThreshold failures in a row; after the cool-down it gets traffic
// again, one more failure cools it down twice as long, and a success ends
// the episode.
func TestUpstreamThatKeepsFailingCoolsDown(t *testing.T) {
	clock := newClock()
	bad := &fakeUp{name: "bad", up: 1, err: smppclient.ErrTimeout}
	good := &fakeUp{name: "good", up: 1}
	r := New(Config{
		Routes: map[string][]Member{"shop": {{Upstream: bad, Weight: 1_000_000}, {Upstream: good, Weight: 1}}},
		Now:    clock.Now, FailThreshold: 3, Cooldown: time.Second, MaxCooldown: 4 * time.Second, Sleep: noSleep,
	})
	var j []string
	send := func() string { return r.Forward(context.Background(), attempt(t, &j)).Upstream }
	for i := range 3 {
		if got := send(); got != "bad" {
			t.Fatalf("submit %d went to %s, want bad (it weighs a million times more and has not failed 3 times yet)", i, got)
		}
	}
	if r.Healthy("bad") {
		t.Fatalf("bad is healthy after 3 timeouts in a row")
	}
	for range 10 {
		if got := send(); got != "good" {
			t.Fatalf("while bad cools down a submit went to %s", got)
		}
	}
	for _, cool := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		clock.Advance(cool - time.Millisecond)
		if got := send(); got != "good" {
			t.Fatalf("%v into a %v cool-down a submit went to %s", cool-time.Millisecond, cool, got)
		}
		clock.Advance(time.Millisecond)
		if got := send(); got != "bad" {
			t.Fatalf("after a %v cool-down a submit went to %s, want bad (tried again)", cool, got)
		}
		if r.Healthy("bad") {
			t.Fatalf("one failure after a cool-down did not cool bad down again")
		}
	}
	// It recovers: after the cool-down a success ends the episode, and the
	// threshold applies again.
	clock.Advance(4 * time.Second)
	bad.err = nil
	if got := send(); got != "bad" {
		t.Fatalf("after recovery a submit went to %s", got)
	}
	bad.err = smppclient.ErrTimeout
	for i := range 3 {
		if got := send(); got != "bad" {
			t.Fatalf("after a success, failure %d already moved traffic to %s", i+1, got)
		}
	}
	if r.Healthy("bad") {
		t.Errorf("3 new failures in a row did not cool bad down")
	}
}

// Throttling and full windows are load, not failure; permanent errors mean
// the upstream works. None of them cools an upstream down. A route with
// one upstream keeps using it while it cools down.
func TestWhatDoesNotCoolDown(t *testing.T) {
	tests := map[string]*fakeUp{
		"0x58":              {name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusThrottled }},
		"permanent error":   {name: "a", up: 1, status: func(int) smpp.Status { return smpp.StatusInvDstAdr }},
		"every window full": {name: "a", up: 1, err: errBusy()},
	}
	for name, up := range tests {
		r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1}}}, FailThreshold: 2, Sleep: noSleep})
		var j []string
		for range 5 {
			r.Forward(context.Background(), attempt(t, &j))
		}
		if !r.Healthy("a") {
			t.Errorf("%s: the upstream cools down, want healthy", name)
		}
	}
	only := &fakeUp{name: "only", up: 1, err: smppclient.ErrSessionLost}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: only, Weight: 1}}}, FailThreshold: 2, Sleep: noSleep})
	var j []string
	for range 5 {
		if got := r.Forward(context.Background(), attempt(t, &j)).Upstream; got != "only" {
			t.Fatalf("single-upstream route sent to %q", got)
		}
	}
	if only.calls != 5 || r.Healthy("only") {
		t.Errorf("calls = %d, healthy %v; want 5 calls to the cooling-down upstream (nothing else is up)", only.calls, r.Healthy("only"))
	}
}

// Back-pressure is per route: a submit that waited route_wait in vain for
// a full upstream (nothing sent) tries another weighted member; 0x58 comes
// only when every member was full. Pick itself ignores
// free slots (the split by weight holds under load). Backups do not take
// overflow, and segments stay on their upstream.
func TestFullUpstreamOverflows(t *testing.T) {
	newUp := func(name string, full bool) *fullUp {
		return &fullUp{fakeBinds: fakeBinds{fakeUp: fakeUp{name: name, up: 1}, sessions: []string{name + "/1"}}, full: full}
	}
	a, b, bk := newUp("a", true), newUp("b", false), newUp("backup", false)
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1_000_000}, {Upstream: b, Weight: 1}, {Upstream: bk, Weight: 0}}}, Sleep: noSleep})
	if m, _ := r.Pick("shop", smpp.Segment{}, "", nil); m.Upstream.Name() != "a" {
		t.Errorf("Pick with a full = %s, want a (by weight)", m.Upstream.Name())
	}
	var j []string
	res := r.Forward(context.Background(), attempt(t, &j))
	if res.Kind != dedup.Answered || res.Upstream != "b" || a.calls != 1 || res.Attempts != 2 {
		t.Errorf("Forward with a full = kind %d via %s after %d tries (a refused %d), want answered by b on the 2nd try", res.Kind, res.Upstream, res.Attempts, a.calls)
	}

	// Every weighted member full: 0x58 after trying each once, and the
	// idle backup is not used.
	a.calls = 0
	b.full = true
	res = r.Forward(context.Background(), attempt(t, &j))
	if res.Kind != dedup.NotSent || res.Status != smpp.StatusThrottled || a.calls != 1 || b.calls != 1 {
		t.Errorf("Forward with the route full = kind %d status %v after %d+%d tries, want not sent, 0x58 after one each", res.Kind, res.Status, a.calls, b.calls)
	}
	if len(bk.prefers) != 0 {
		t.Errorf("the backup took %d submits while the weighted upstreams were up", len(bk.prefers))
	}

	// A segment whose upstream is full waits for it and stays.
	a.full, b.full = false, false
	r = New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}, {Upstream: b, Weight: 1}}}, Sleep: noSleep})
	first := r.Forward(context.Background(), segmentAttempt(t, "447700", 1, 1))
	mine := map[string]*fullUp{"a": a, "b": b}[first.Upstream]
	mine.full = true
	res = r.Forward(context.Background(), segmentAttempt(t, "447700", 1, 2))
	if res.Kind != dedup.NotSent || res.Upstream != first.Upstream {
		t.Errorf("segment 2 with its upstream full = kind %d via %s, want not sent via %s (no overflow)", res.Kind, res.Upstream, first.Upstream)
	}
}

// A segment that was not sent (its journal refused: its key already had a
// record) does not decide where the segments of its message go: only a
// segment written upstream does.
func TestASegmentNotSentDoesNotPinItsMessage(t *testing.T) {
	a := &fakeBinds{fakeUp: fakeUp{name: "a", up: 1}, sessions: []string{"a/1"}}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}}}})
	att := segmentAttempt(t, "44770000", 7, 1)
	att.Journal = func(string, string, uint32) error { return errors.New("key created by another writer") }
	if res := r.Forward(context.Background(), att); res.Kind != dedup.NotSent {
		t.Fatalf("segment whose journal was refused = %v, want not sent", res.Kind)
	}
	if n := len(r.sticky.m); n != 0 {
		t.Errorf("%d messages pinned to a session by a segment that was not sent, want 0", n)
	}
	if res := r.Forward(context.Background(), segmentAttempt(t, "44770000", 7, 1)); res.Kind != dedup.Answered || len(r.sticky.m) != 1 {
		t.Errorf("segment sent = %v with %d messages pinned, want answered and its message pinned", res.Kind, len(r.sticky.m))
	}
}
