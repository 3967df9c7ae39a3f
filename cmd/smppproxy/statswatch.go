package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
)

// watchFrame is what `stats --watch` shows per interval: rates per second
// over the interval, not totals. It is also the JSON object --json streams.
type watchFrame struct {
	At       time.Time `json:"at"`
	Interval float64   `json:"interval_seconds"`
	// Submits per second by outcome (forwarded, replayed, …), and in all.
	Submits      map[string]float64 `json:"submits_per_second"`
	SubmitsTotal float64            `json:"submits_total_per_second"`
	// Receipts (and MO) from the upstreams per second.
	Receipts  float64                  `json:"receipts_per_second"`
	Upstreams map[string]upstreamRates `json:"upstreams"`
}

// upstreamRates are one upstream's rates over the interval.
type upstreamRates struct {
	// Submits is requests written per second.
	Submits float64 `json:"submits_per_second"`
	// Errors is answers other than ESME_ROK and requests without an
	// answer (timeout, session lost, …) per second.
	Errors   float64 `json:"errors_per_second"`
	Bound    float64 `json:"bound"`
	InFlight float64 `json:"in_flight"`
}

// perSecond is the per-second increase of a counter from a to b over dt; a
// counter that went down (the proxy restarted) counts from zero.
func perSecond(a, b, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	d := b - a
	if d < 0 {
		d = b
	}
	return d / dt
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// ratesBetween is the frame of the interval from prev to cur.
func ratesBetween(prev, cur *admin.Stats, at time.Time, dt time.Duration) watchFrame {
	sec := dt.Seconds()
	f := watchFrame{At: at, Interval: sec, Submits: map[string]float64{}, Upstreams: map[string]upstreamRates{}}
	for o, v := range cur.Submits {
		f.Submits[o] = perSecond(prev.Submits[o], v, sec)
	}
	f.SubmitsTotal = perSecond(sum(prev.Submits), sum(cur.Submits), sec)
	f.Receipts = perSecond(sum(prev.Receipts), sum(cur.Receipts), sec)
	for name, u := range cur.Upstreams {
		p := prev.Upstreams[name]
		if p == nil {
			p = &admin.UpstreamStats{}
		}
		errs := func(s *admin.UpstreamStats) float64 {
			return sum(s.Failed) + sum(s.Responses) - s.Responses["ESME_ROK"]
		}
		f.Upstreams[name] = upstreamRates{
			Submits: perSecond(p.Written, u.Written, sec), Errors: perSecond(errs(p), errs(u), sec),
			Bound: u.Bound, InFlight: u.InFlight,
		}
	}
	return f
}

// sparkBlocks draw a sparkline, lowest to highest.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws vs scaled to their maximum (all lowest when every value
// is 0).
func sparkline(vs []float64) string {
	top := 0.0
	for _, v := range vs {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range vs {
		i := 0
		if top > 0 {
			i = int(v / top * float64(len(sparkBlocks)-1))
		}
		b.WriteRune(sparkBlocks[min(max(i, 0), len(sparkBlocks)-1)])
	}
	return b.String()
}

// sparkWidth is how many intervals a sparkline shows.
const sparkWidth = 30

// watcher prints frames and keeps each upstream's recent submit rates.
type watcher struct {
	w       io.Writer
	json    bool
	history map[string][]float64
}

func (wt *watcher) print(f watchFrame) error {
	for name, u := range f.Upstreams {
		h := append(wt.history[name], u.Submits)
		if len(h) > sparkWidth {
			h = h[len(h)-sparkWidth:]
		}
		wt.history[name] = h
	}
	if wt.json {
		return json.NewEncoder(wt.w).Encode(f) // one object per line
	}
	tw := tabwriter.NewWriter(wt.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s  (per second over %.1fs)\n", f.At.Local().Format("15:04:05"), f.Interval)
	var parts []string
	for _, o := range ordered(f.Submits, outcomeOrder) {
		if f.Submits[o] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", o, f.Submits[o]))
		}
	}
	fmt.Fprintf(tw, "SUBMITS/S\t%.1f\t%s\n", f.SubmitsTotal, strings.Join(parts, ", "))
	fmt.Fprintf(tw, "RECEIPTS/S\t%.1f\t\n", f.Receipts)
	for _, name := range slices.Sorted(maps.Keys(f.Upstreams)) {
		u := f.Upstreams[name]
		fmt.Fprintf(tw, "  %s\t%.1f/s\terrors %.1f/s, %s bound, %s in flight  %s\n", name, u.Submits, u.Errors, num(u.Bound), num(u.InFlight), sparkline(wt.history[name]))
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// watchStats polls the stats every interval until ctx ends and prints the
// rates of each interval.
func watchStats(ctx context.Context, cl *admin.Client, interval time.Duration, wt *watcher) error {
	prev, err := cl.Stats(ctx)
	if err != nil {
		return err
	}
	prevAt := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := cl.Stats(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		if err := wt.print(ratesBetween(prev, cur, now, now.Sub(prevAt))); err != nil {
			return err
		}
		prev, prevAt = cur, now
	}
}

// statsAction is `stats`: the totals once, or with --watch the rates of
// every interval until Ctrl-C.
func statsAction(c *cli.Context) error {
	if !c.Bool("watch") {
		return adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (*admin.Stats, error) {
			return cl.Stats(c.Context)
		}, func(w io.Writer, s *admin.Stats) { printStats(w, s, time.Now()) })(c)
	}
	if _, err := positional(c, 0, ""); err != nil {
		return err
	}
	interval := c.Duration("interval")
	if interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %v: at least 100ms", interval)
	}
	cl, err := adminClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	return watchStats(ctx, cl, interval, &watcher{w: c.App.Writer, json: c.Bool("json"), history: map[string][]float64{}})
}
