package route

import (
	"context"
	"testing"

	"github.com/smppproxy/smppproxy/dedup"
)

func TestDrainedUpstreamTakesNoNewSubmitsUntilResumed(t *testing.T) {
	a, b := &fakeUp{name: "a", up: 1}, &fakeUp{name: "b", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}, {Upstream: b, Weight: 1}}}, Sleep: noSleep})
	if !r.Drain("a") || r.Drain("a") {
		t.Fatal("Drain(a) twice: want true (drained now), then false (already)")
	}
	var journal []string
	for range 20 {
		if res := r.Forward(context.Background(), attempt(t, &journal)); res.Kind != dedup.Answered || res.Upstream != "b" {
			t.Fatalf("submit while a is drained = %+v, want answered by b", res)
		}
	}
	if a.calls != 0 {
		t.Errorf("drained upstream a got %d submits, want 0", a.calls)
	}
	if !r.Resume("a") || r.Drained("a") {
		t.Fatal("Resume(a): want true and a no longer drained")
	}
	for range 200 {
		r.Forward(context.Background(), attempt(t, &journal))
		if a.calls > 0 {
			return
		}
	}
	t.Error("a resumed upstream got none of 200 submits split by equal weights")
}

func TestEveryUpstreamDrainedIsNotSentWithoutWaiting(t *testing.T) {
	a := &fakeUp{name: "a", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}}}, Sleep: noSleep})
	r.Drain("a")
	var journal []string
	res := r.Forward(context.Background(), attempt(t, &journal))
	if res.Kind != dedup.NotSent || a.calls != 0 || len(journal) != 0 {
		t.Errorf("submit with the whole route drained = %+v (%d calls, journal %v), want not sent, nothing journaled", res, a.calls, journal)
	}
}

func TestSetRoutesAppliesToTheNextSubmit(t *testing.T) {
	a, b := &fakeUp{name: "a", up: 1}, &fakeUp{name: "b", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: a, Weight: 1}}}, Sleep: noSleep})
	var journal []string
	r.Forward(context.Background(), attempt(t, &journal))
	r.SetRoutes(map[string][]Member{"shop": {{Upstream: b, Weight: 1}}, "bank": {{Upstream: a, Weight: 1}}})
	if res := r.Forward(context.Background(), attempt(t, &journal)); res.Upstream != "b" {
		t.Errorf("submit after SetRoutes went to %q, want b", res.Upstream)
	}
	if a.calls != 1 || b.calls != 1 {
		t.Errorf("calls a=%d b=%d, want 1 and 1", a.calls, b.calls)
	}
	if !r.Healthy("b") {
		t.Error("an upstream added by SetRoutes has no health tracking (reported unhealthy)")
	}
}
