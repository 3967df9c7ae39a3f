package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// Rates, not totals: the increase over the interval per second; a counter
// that went down (a restart) counts from zero; errors are non-OK answers
// and requests without one.
func TestWatchRatesAreIncreasesPerSecond(t *testing.T) {
	prev := &admin.Stats{Submits: map[string]float64{"forwarded": 100, "replayed": 10}, Receipts: map[string]float64{"routed": 50},
		Upstreams: map[string]*admin.UpstreamStats{"smsc": {Written: 100, Responses: map[string]float64{"ESME_ROK": 95, "ESME_RTHROTTLED": 5}}}}
	cur := &admin.Stats{Submits: map[string]float64{"forwarded": 120, "replayed": 4}, Receipts: map[string]float64{"routed": 60},
		Upstreams: map[string]*admin.UpstreamStats{
			"smsc":  {Written: 120, Responses: map[string]float64{"ESME_ROK": 110, "ESME_RTHROTTLED": 7}, Failed: map[string]float64{"timeout": 2}},
			"other": {Written: 8},
		}}
	f := ratesBetween(prev, cur, time.Now(), 2*time.Second)
	want := map[string]float64{"forwarded": 10, "replayed": 2, "total": 7, "receipts": 5, "smsc submits": 10, "smsc errors": 2, "other submits": 4}
	got := map[string]float64{"forwarded": f.Submits["forwarded"], "replayed": f.Submits["replayed"], "total": f.SubmitsTotal, "receipts": f.Receipts,
		"smsc submits": f.Upstreams["smsc"].Submits, "smsc errors": f.Upstreams["smsc"].Errors, "other submits": f.Upstreams["other"].Submits}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if s := sparkline([]float64{0, 1, 2, 4, 8}); s != "▁▁▂▄█" {
		t.Errorf("sparkline = %q", s)
	}
	if s := sparkline([]float64{0, 0}); s != "▁▁" {
		t.Errorf("sparkline of zeros = %q", s)
	}
}

// stats --watch --json against a running proxy streams one object per
// interval; the rates times the intervals add up to the submits sent, and
// it stops when its context ends. The table form draws a sparkline.
func TestStatsWatchStreamsRatesUntilCancelled(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	p := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	for _, asJSON := range []bool{true, false} {
		var out testkit.Buffer
		app := newApp()
		app.Writer = &out
		ctx, cancel := context.WithCancel(context.Background())
		args := []string{"smppproxy", "stats", "--watch", "--interval", "150ms", "--admin", p.adminURL}
		if asJSON {
			args = append(args, "--json")
		}
		done := make(chan error, 1)
		go func() { done <- app.RunContext(ctx, args) }()
		// A first frame, then the submits, then two more frames.
		testkit.Eventually(t, 10*time.Second, func() bool { return strings.Count(out.String(), "\n") >= 1 }, "no first frame")
		const n = 7
		if asJSON {
			for i := range n {
				submit(t, c, "w-"+string(rune('a'+i)), "hello")
			}
		}
		lines := strings.Count(out.String(), "\n")
		testkit.Eventually(t, 10*time.Second, func() bool { return strings.Count(out.String(), "\n") >= lines+4 }, "no frames after the submits")
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("stats --watch: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("stats --watch did not stop when its context ended")
		}
		if !asJSON {
			if !strings.Contains(out.String(), "SUBMITS/S") || !strings.ContainsAny(out.String(), "▁█") {
				t.Errorf("table output:\n%s", out.String())
			}
			continue
		}
		forwarded := 0.0
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			var f watchFrame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Fatalf("line %q is not a JSON frame: %v", sc.Text(), err)
			}
			forwarded += f.Submits["forwarded"] * f.Interval
		}
		if math.Round(forwarded) != n {
			t.Errorf("forwarded rates × intervals add up to %v, want %d:\n%s", forwarded, n, out.String())
		}
	}
}
