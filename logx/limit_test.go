package logx

import (
	"fmt"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestLimiterLetsOneLinePerKeyPerIntervalAndCountsTheRest(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := NewLimiter(time.Minute, 10, c.now)
	if ok, n := l.Allow("10.0.0.1"); !ok || n != 0 {
		t.Fatalf("first Allow = %v, %d; want true, 0", ok, n)
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.Allow("10.0.0.1"); ok {
			t.Fatalf("Allow #%d within the interval = true, want false", i+2)
		}
	}
	if ok, _ := l.Allow("10.0.0.2"); !ok {
		t.Fatal("another key is limited by the first one's lines")
	}
	c.advance(time.Minute)
	if ok, n := l.Allow("10.0.0.1"); !ok || n != 5 {
		t.Fatalf("Allow after the interval = %v, %d; want true, 5 suppressed", ok, n)
	}
	if ok, _ := l.Allow("10.0.0.1"); ok {
		t.Fatal("the interval did not restart after a line passed")
	}
}

func TestLimiterKeepsAtMostMaxKeysUnderAFloodOfSources(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := NewLimiter(time.Minute, 4, c.now)
	passed := 0
	for i := 0; i < 1000; i++ {
		if ok, _ := l.Allow(fmt.Sprintf("src-%d", i)); ok {
			passed++
		}
	}
	if len(l.keys) > 4 {
		t.Fatalf("tracked %d keys, want at most 4", len(l.keys))
	}
	// 3 distinct keys then the shared overflow entry: 4 lines in all.
	if passed != 4 {
		t.Fatalf("%d lines passed in one interval from 1000 sources, want 4", passed)
	}
	if n := l.keys[overflowKey].suppressed; n != 996 {
		t.Fatalf("overflow entry counted %d held-back lines, want 996", n)
	}
}
