package admin

import (
	"testing"
	"time"
)

// The page's rates are counter differences over the last minute (the
// span it reports), from the samples its own requests take: none before
// a second sample, none for a counter that went down, and a page asked
// less often than once a minute still gets a rate over its longer span.
func TestStatusRatesAreCounterDifferencesOverTheLastMinute(t *testing.T) {
	r := newRateRing(time.Minute)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if rates, span := r.observe(t0, map[string]float64{"x": 100, "y": 5}); rates != nil || span != 0 {
		t.Fatalf("first sample: rates %v over %v, want none", rates, span)
	}
	// A second request within rateSpacing has no span to measure yet.
	if rates, _ := r.observe(t0.Add(rateSpacing/2), map[string]float64{"x": 101, "y": 5}); rates != nil {
		t.Fatalf("within %v of the first sample: rates %v, want none", rateSpacing, rates)
	}
	rates, span := r.observe(t0.Add(5*time.Second), map[string]float64{"x": 150, "y": 2})
	if span != 5*time.Second || rates["x"] != 10 {
		t.Fatalf("after 5s: x rate %v over %v, want 10/s over 5s", rates["x"], span)
	}
	if _, ok := rates["y"]; ok {
		t.Errorf("a counter that went down has rate %v, want none", rates["y"])
	}
	// Samples every 5 s for two minutes: the rate is over the last minute.
	x := 150.0
	for at := 10 * time.Second; at <= 2*time.Minute; at += 5 * time.Second {
		x += 5 * 20 // 20/s
		rates, span = r.observe(t0.Add(at), map[string]float64{"x": x})
	}
	if span != time.Minute || rates["x"] != 20 {
		t.Fatalf("after 2 min of 20/s: rate %v over %v, want 20/s over 1m", rates["x"], span)
	}
	if n := len(r.samples); n > int(time.Minute/(5*time.Second))+1 {
		t.Errorf("the ring keeps %d samples, want at most a minute's", n)
	}
	// Five minutes later: the rate is over those five minutes.
	rates, span = r.observe(t0.Add(7*time.Minute), map[string]float64{"x": x + 300*3})
	if span != 5*time.Minute || rates["x"] != 3 {
		t.Fatalf("after a 5 min gap at 3/s: rate %v over %v, want 3/s over 5m", rates["x"], span)
	}
}
