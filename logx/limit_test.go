package logx

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

func TestLimiterLetsOneLinePerKeyPerIntervalAndCountsTheRest(t *testing.T) {
	c := testkit.NewClock(time.Unix(1000, 0))
	l := NewLimiter(time.Minute, 10, c.Now)
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
	c.Advance(time.Minute)
	if ok, n := l.Allow("10.0.0.1"); !ok || n != 5 {
		t.Fatalf("Allow after the interval = %v, %d; want true, 5 suppressed", ok, n)
	}
	if ok, _ := l.Allow("10.0.0.1"); ok {
		t.Fatal("the interval did not restart after a line passed")
	}
}

func TestLimiterKeepsAtMostMaxKeysUnderAFloodOfSources(t *testing.T) {
	c := testkit.NewClock(time.Unix(1000, 0))
	l := NewLimiter(time.Minute, 4, c.Now)
	passed := 0
	for i := 0; i < 1000; i++ {
		if ok, _ := l.Allow(fmt.Sprintf("src-%d", i)); ok {
			passed++
		}
	}
	if n := l.keys.Len(); n > 4 {
		t.Fatalf("tracked %d keys, want at most 4", n)
	}
	// 3 distinct keys then the shared overflow entry: 4 lines in all.
	if passed != 4 {
		t.Fatalf("%d lines passed in one interval from 1000 sources, want 4", passed)
	}
	if n := l.keys.overflow.Value.suppressed; n != 996 {
		t.Fatalf("overflow entry counted %d held-back lines, want 996", n)
	}
}

// Once the bound is reached, keys past their interval with nothing held
// back make room for new ones; a key still holding back lines keeps its
// entry, so its count is reported when its next line passes.
func TestLimiterForgetsQuietKeysButNotHeldBackCounts(t *testing.T) {
	c := testkit.NewClock(time.Unix(1000, 0))
	l := NewLimiter(time.Minute, 4, c.Now)
	for _, k := range []string{"a", "b", "c"} {
		l.Allow(k)
	}
	l.Allow("c") // held back: c must survive the interval
	c.Advance(time.Minute)
	for _, k := range []string{"d", "e"} {
		if ok, _ := l.Allow(k); !ok {
			t.Fatalf("Allow(%q) after a and b went quiet = false, want an entry of its own", k)
		}
	}
	l.Allow("f") // the first line of the overflow entry
	if ok, _ := l.Allow("g"); ok {
		t.Fatal(`Allow("g") = true with c, d, e and the overflow tracked of 4; want it held back on the shared entry`)
	}
	if ok, n := l.Allow("c"); !ok || n != 1 {
		t.Fatalf(`Allow("c") = %v, %d; want true, 1 held back (its entry kept)`, ok, n)
	}
}

// Making room for a new key looks at the oldest entries only: a flood of
// distinct sources costs amortised O(1) per line, not a scan of every key
// tracked per new one.
func TestLimiterEvictionWorkIsBoundedPerNewKey(t *testing.T) {
	c := testkit.NewClock(time.Unix(1000, 0))
	const maxKeys, flood = 1000, 20000
	l := NewLimiter(time.Minute, maxKeys, c.Now)
	for round := 0; round < 3; round++ { // full, then all quiet, then full again
		for i := 0; i < flood; i++ {
			l.Allow(fmt.Sprintf("src-%d-%d", round, i))
			c.Advance(time.Millisecond)
		}
	}
	if n := l.keys.Len(); n > maxKeys {
		t.Fatalf("tracked %d keys, want at most %d", n, maxKeys)
	}
	if looked := l.keys.examined; looked > 3*flood*2 {
		t.Fatalf("looked at %d entries for %d new keys, want at most 2 per key", looked, 3*flood)
	}
}

// Log writes a key's first line, holds back the next ones within the
// interval, and the line after it carries how many were held back.
func TestLimiterLogWritesOneLinePerIntervalWithTheHeldBackCount(t *testing.T) {
	c := testkit.NewClock(time.Unix(1000, 0))
	l := NewLimiter(time.Minute, 10, c.Now)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	for range 4 {
		l.Log(log, slog.LevelWarn, "up", "upstream failing", "upstream", "smsc")
	}
	c.Advance(time.Minute)
	l.Log(log, slog.LevelWarn, "up", "upstream failing", "upstream", "smsc")
	want := "level=WARN msg=\"upstream failing\" upstream=smsc\n" +
		"level=WARN msg=\"upstream failing\" upstream=smsc suppressed=3\n"
	if buf.String() != want {
		t.Errorf("logged:\n%s\nwant:\n%s", buf.String(), want)
	}
}
