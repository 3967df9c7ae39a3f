package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "load generator: submits over several binds with a window, a share of retried keys; throughput and latency",
		Description: "Against --target, or with --embedded against an in-process SMSC simulator, measured twice:\n" +
			"directly and through an in-process smppproxy on a temporary store, side by side.\n" +
			"With --processes, as a user runs it: `smppproxy sim` and `smppproxy serve` as child processes,\n" +
			"rounds alternating direct and proxied load, one table against the targets.",
		Flags:  append(benchFlags(), benchProcessFlags()...),
		Action: benchAction,
	}
}

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "target", Usage: "SMPP address to load (host:port)"},
		&cli.StringFlag{Name: "system-id", Usage: "bind system_id"},
		&cli.StringFlag{Name: "password", Usage: "bind password"},
		&cli.IntFlag{Name: "binds", Value: 4, Usage: "parallel sessions"},
		&cli.IntFlag{Name: "window", Value: 50, Usage: "outstanding submits per session (100 with --processes)"},
		&cli.IntFlag{Name: "count", Value: 10000, Usage: "total submits (per run with --processes)"},
		&cli.Float64Flag{Name: "duplicates", Value: 0.1, Usage: "share of submits that reuse an earlier key with the same text (0 <= d < 1; --processes sends fresh keys and measures retries in a run of their own)"},
		&cli.StringFlag{Name: "key-tag", Value: "0x1400", Usage: "TLV tag of the idempotency key (hex or decimal)"},
		&cli.StringFlag{Name: "key-prefix", Usage: "start every key with this (keys are prefix + 0, 1, ...); the same prefix and --count again retries the keys of an earlier run; empty = a random prefix"},
		&cli.BoolFlag{Name: "no-key", Usage: "send no key TLV"},
		&cli.Float64Flag{Name: "rate", Usage: "submits per second over all sessions (0 = as fast as the window allows; with --processes the offered rate of the fixed-rate rows, default 5000)"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "response timeout of one submit"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (no progress bar)"},
		&cli.StringFlag{Name: "compare", Usage: "run the same load against this second address and print both side by side"},
		&cli.BoolFlag{Name: "embedded", Aliases: []string{"self"}, Usage: "run an SMSC simulator and smppproxy in process; measure direct vs through the proxy"},
		&cli.BoolFlag{Name: "verbose", Usage: "with --embedded: log the proxy to stderr"},
		&cli.BoolFlag{Name: "receipts", Aliases: []string{"dlr"}, Usage: "ask for a delivery receipt on every submit; report receipts/s and the receipt latency " +
			"(submit_sm_resp → deliver_sm) percentiles (with --embedded the simulator sends them)"},
	}
}

// benchOptionsFrom reads the load's flags.
func benchOptionsFrom(c *cli.Context) (benchOptions, error) {
	o := benchOptions{
		Target: c.String("target"), SystemID: c.String("system-id"), Password: c.String("password"),
		Binds: c.Int("binds"), Window: c.Int("window"), Count: c.Int("count"),
		Duplicates: c.Float64("duplicates"), NoKey: c.Bool("no-key"), Rate: c.Float64("rate"),
		Timeout: c.Duration("timeout"), Receipts: c.Bool("receipts"), KeyPrefix: c.String("key-prefix"),
	}
	tag, err := strconv.ParseUint(c.String("key-tag"), 0, 16)
	if err != nil {
		return o, fmt.Errorf("bench: --key-tag %q: want a 16-bit tag such as 0x1400", c.String("key-tag"))
	}
	o.KeyTag = uint16(tag)
	if !c.Bool("json") && term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = c.App.ErrWriter
	}
	return o, o.validate()
}

func benchAction(c *cli.Context) error {
	o, err := benchOptionsFrom(c)
	if err != nil {
		return err
	}
	if c.Bool("processes") {
		return processBenchAction(c, o)
	}
	runs, err := benchRuns(c, o)
	if err != nil {
		return err
	}
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		return printBenchJSON(w, runs)
	case len(runs) == 1:
		printBench(w, runs[0])
	default:
		printBenchComparison(w, runs[0], runs[1])
	}
	return nil
}

// benchRuns runs the load of --embedded, or against --target (and
// --compare).
func benchRuns(c *cli.Context, o benchOptions) ([]benchResult, error) {
	ctx := c.Context
	switch {
	case c.Bool("embedded"):
		log := slog.New(slog.DiscardHandler)
		if c.Bool("verbose") {
			log = slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
		}
		return runEmbeddedBench(ctx, o, log)
	case o.Target == "":
		return nil, errors.New("bench: --target, --embedded or --processes is required")
	}
	o.Label = o.Target
	r, err := runBench(ctx, o)
	runs := []benchResult{r}
	if err == nil && c.String("compare") != "" {
		o.Target, o.Label = c.String("compare"), c.String("compare")
		r, err = runBench(ctx, o)
		runs = append(runs, r)
	}
	return runs, err
}

// benchOptions configure one runBench.
type benchOptions struct {
	Target string
	// Targets, when set, are the addresses the binds are spread over
	// round-robin (several proxy instances); Target is then the first.
	Targets            []string
	SystemID, Password string
	Binds, Window      int
	Count              int
	// Duplicates is the share of submits that reuse an earlier key (and its
	// text); the key is drawn at random among those already sent.
	Duplicates float64
	KeyTag     uint16
	NoKey      bool
	// Rate caps submits per second over all sessions; 0 = no cap.
	Rate    float64
	Timeout time.Duration
	// KeyPrefix starts every key; "" = a random one, so that runs against
	// a proxy with a persistent store do not replay each other.
	KeyPrefix string
	// Progress receives a progress bar; nil = none.
	Progress io.Writer
	Label    string
	// Receipts asks for a delivery receipt on every submit and counts the
	// receipts received, until none came for ReceiptQuiet (default 1s)
	// after the last answer, or Timeout.
	Receipts     bool
	ReceiptQuiet time.Duration
	// Duration, when > 0, stops sending after that long (Count is then
	// the most sent).
	Duration time.Duration
	// IDs keeps the message id of every accepted submit by key index
	// (benchResult.ids), to compare a retry's answer with the first one.
	IDs bool
	// dlr measures receipt latency (set by runBench with Receipts).
	dlr *receiptLatency
}

func (o *benchOptions) validate() error {
	switch {
	case o.Binds < 1:
		return fmt.Errorf("bench: --binds %d: at least 1", o.Binds)
	case o.Window < 1:
		return fmt.Errorf("bench: --window %d: at least 1", o.Window)
	case o.Count < 1:
		return fmt.Errorf("bench: --count %d: at least 1", o.Count)
	case o.Duplicates < 0 || o.Duplicates >= 1 || math.IsNaN(o.Duplicates):
		return fmt.Errorf("bench: --duplicates %v: want 0 <= d < 1", o.Duplicates)
	case o.Rate < 0:
		return fmt.Errorf("bench: --rate %v: must not be negative", o.Rate)
	case o.Duration < 0:
		return fmt.Errorf("bench: --duration %v: must not be negative", o.Duration)
	}
	return nil
}

// latencies in milliseconds.
type latencies struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// benchResult is what one runBench measured.
type benchResult struct {
	Label  string `json:"label,omitempty"`
	Target string `json:"target"`
	Binds  int    `json:"binds"`
	Window int    `json:"window"`
	// Count submits were sent, DuplicateSubmits of them reusing a key.
	Count            int `json:"count"`
	DuplicateSubmits int `json:"duplicate_submits"`
	// Answered submits got a response (any status); Errors did not
	// (timeout, connection lost).
	Answered int `json:"answered"`
	Errors   int `json:"errors"`
	// ErrorCounts counts the errors by kind (their text, sequence
	// numbers left out); ErrorSamples is its most frequent kinds as
	// "N× text" lines.
	ErrorCounts  map[string]int `json:"error_counts,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	Seconds      float64        `json:"seconds"`
	// Throughput is answered submits per second.
	Throughput float64        `json:"throughput"`
	LatencyMS  latencies      `json:"latency_ms"`
	Statuses   map[string]int `json:"statuses"`
	// Filled by --embedded: submits that reached the simulator during the
	// run and keys it received more than once.
	ReachedSMSC      *int64 `json:"reached_smsc,omitempty"`
	DuplicatesAtSMSC *int   `json:"duplicates_at_smsc,omitempty"`
	// With --receipts: delivery receipts received, and their rate from
	// the first to the last one received.
	Receipts          *int    `json:"receipts,omitempty"`
	ReceiptsPerSecond float64 `json:"receipts_per_second,omitempty"`
	// ReceiptLatencyMS is the time from a submit_sm_resp (ESME_ROK) to
	// the receipt naming its message id, over the ReceiptsMatched receipts
	// whose id matched an answered submit.
	ReceiptLatencyMS *latencies `json:"receipt_latency_ms,omitempty"`
	ReceiptsMatched  int        `json:"receipts_matched,omitempty"`
	// ids: key index → message id, with benchOptions.IDs.
	ids map[int]string
}

func percentiles(d []time.Duration) latencies {
	if len(d) == 0 {
		return latencies{}
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return math.Round(float64(x)/1e3) / 1e3 }
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return ms(d[max(0, min(i, len(d)-1))])
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return latencies{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(d[len(d)-1]), Mean: ms(sum / time.Duration(len(d)))}
}

func printBenchJSON(w io.Writer, runs []benchResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(runs) == 1 {
		return enc.Encode(runs[0])
	}
	out := struct {
		Runs            []benchResult `json:"runs"`
		ThroughputRatio float64       `json:"throughput_ratio"`
	}{Runs: runs}
	if runs[0].Throughput > 0 {
		out.ThroughputRatio = math.Round(runs[1].Throughput/runs[0].Throughput*1000) / 1000
	}
	return enc.Encode(out)
}

func statusSummary(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func printBench(w io.Writer, r benchResult) {
	fmt.Fprintf(w, "bench %s: %d submits (%d reusing an earlier key), %d binds × window %d\n", r.Target, r.Count, r.DuplicateSubmits, r.Binds, r.Window)
	fmt.Fprintf(w, "  throughput  %.0f submits/s (%d answered in %.2fs)\n", r.Throughput, r.Answered, r.Seconds)
	l := r.LatencyMS
	fmt.Fprintf(w, "  latency     p50 %.2fms  p90 %.2fms  p99 %.2fms  max %.2fms  mean %.2fms\n", l.P50, l.P90, l.P99, l.Max, l.Mean)
	fmt.Fprintf(w, "  statuses    %s\n", statusSummary(r.Statuses))
	fmt.Fprintf(w, "  errors      %d\n", r.Errors)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "    %s\n", e)
	}
	if r.Receipts != nil {
		fmt.Fprintf(w, "  receipts    %.0f receipts/s (%d received)\n", r.ReceiptsPerSecond, *r.Receipts)
	}
	if l := r.ReceiptLatencyMS; l != nil {
		fmt.Fprintf(w, "  receipt latency (submit_sm_resp → deliver_sm, %d matched)  p50 %.2fms  p90 %.2fms  p99 %.2fms  max %.2fms\n",
			r.ReceiptsMatched, l.P50, l.P90, l.P99, l.Max)
	}
}

func printBenchComparison(w io.Writer, a, b benchResult) {
	fmt.Fprintf(w, "bench: %d submits (%d reusing an earlier key), %d binds × window %d\n\n", a.Count, a.DuplicateSubmits, a.Binds, a.Window)
	ratio := func(x, y float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", y/x)
	}
	la, lb := a.LatencyMS, b.LatencyMS
	row := func(label, x, y, r string) { fmt.Fprintf(w, "  %-22s %20s %20s %8s\n", label, x, y, r) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	row("", a.Label, b.Label, "ratio")
	row("throughput (submits/s)", fmt.Sprintf("%.0f", a.Throughput), fmt.Sprintf("%.0f", b.Throughput), ratio(a.Throughput, b.Throughput))
	row("latency p50 (ms)", f(la.P50), f(lb.P50), ratio(la.P50, lb.P50))
	row("latency p90 (ms)", f(la.P90), f(lb.P90), ratio(la.P90, lb.P90))
	row("latency p99 (ms)", f(la.P99), f(lb.P99), ratio(la.P99, lb.P99))
	row("latency max (ms)", f(la.Max), f(lb.Max), ratio(la.Max, lb.Max))
	row("answered", strconv.Itoa(a.Answered), strconv.Itoa(b.Answered), "")
	row("errors", strconv.Itoa(a.Errors), strconv.Itoa(b.Errors), "")
	if a.ReachedSMSC != nil && b.ReachedSMSC != nil {
		row("reached the SMSC", strconv.FormatInt(*a.ReachedSMSC, 10), strconv.FormatInt(*b.ReachedSMSC, 10), "")
		row("keys at SMSC twice+", strconv.Itoa(*a.DuplicatesAtSMSC), strconv.Itoa(*b.DuplicatesAtSMSC), "")
	}
	if a.Receipts != nil && b.Receipts != nil {
		row("receipts/s", fmt.Sprintf("%.0f", a.ReceiptsPerSecond), fmt.Sprintf("%.0f", b.ReceiptsPerSecond), ratio(a.ReceiptsPerSecond, b.ReceiptsPerSecond))
		row("receipts received", strconv.Itoa(*a.Receipts), strconv.Itoa(*b.Receipts), "")
	}
	if la, lb := a.ReceiptLatencyMS, b.ReceiptLatencyMS; la != nil && lb != nil {
		row("receipt latency p50 (ms)", f(la.P50), f(lb.P50), ratio(la.P50, lb.P50))
		row("receipt latency p99 (ms)", f(la.P99), f(lb.P99), ratio(la.P99, lb.P99))
	}
	fmt.Fprintf(w, "\n  statuses, %s: %s\n", a.Label, statusSummary(a.Statuses))
	fmt.Fprintf(w, "  statuses, %s: %s\n", b.Label, statusSummary(b.Statuses))
	for _, r := range []benchResult{a, b} {
		for _, e := range r.ErrorSamples {
			fmt.Fprintf(w, "  error, %s: %s\n", r.Label, e)
		}
	}
}
