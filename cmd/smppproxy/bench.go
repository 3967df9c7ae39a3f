package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"golang.org/x/time/rate"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "load generator: submits over several binds with a window, a share of retried keys; throughput and latency",
		Description: "Against --target, or with --embedded against an in-process SMSC simulator, measured twice:\n" +
			"directly and through an in-process smppproxy on a temporary store, side by side.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Usage: "SMPP address to load (host:port)"},
			&cli.StringFlag{Name: "system-id", Usage: "bind system_id"},
			&cli.StringFlag{Name: "password", Usage: "bind password"},
			&cli.IntFlag{Name: "binds", Value: 4, Usage: "parallel sessions"},
			&cli.IntFlag{Name: "window", Value: 50, Usage: "outstanding submits per session"},
			&cli.IntFlag{Name: "count", Value: 10000, Usage: "total submits"},
			&cli.Float64Flag{Name: "duplicates", Value: 0.1, Usage: "share of submits that reuse an earlier key with the same text (0 <= d < 1)"},
			&cli.StringFlag{Name: "key-tag", Value: "0x1400", Usage: "TLV tag of the idempotency key (hex or decimal)"},
			&cli.BoolFlag{Name: "no-key", Usage: "send no key TLV"},
			&cli.Float64Flag{Name: "rate", Usage: "submits per second over all sessions (0 = as fast as the window allows)"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "response timeout of one submit"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (no progress bar)"},
			&cli.StringFlag{Name: "compare", Usage: "run the same load against this second address and print both side by side"},
			&cli.BoolFlag{Name: "embedded", Aliases: []string{"self"}, Usage: "run an SMSC simulator and smppproxy in process; measure direct vs through the proxy"},
			&cli.BoolFlag{Name: "verbose", Usage: "with --embedded: log the proxy to stderr"},
			&cli.BoolFlag{Name: "receipts", Usage: "ask for a delivery receipt on every submit and measure receipts/s received (with --embedded the simulator sends them)"},
		},
		Action: func(c *cli.Context) error {
			o := benchOptions{
				Target: c.String("target"), SystemID: c.String("system-id"), Password: c.String("password"),
				Binds: c.Int("binds"), Window: c.Int("window"), Count: c.Int("count"),
				Duplicates: c.Float64("duplicates"), NoKey: c.Bool("no-key"), Rate: c.Float64("rate"),
				Timeout: c.Duration("timeout"), Receipts: c.Bool("receipts"),
			}
			tag, err := strconv.ParseUint(c.String("key-tag"), 0, 16)
			if err != nil {
				return fmt.Errorf("bench: --key-tag %q: want a 16-bit tag such as 0x1400", c.String("key-tag"))
			}
			o.KeyTag = uint16(tag)
			asJSON := c.Bool("json")
			if !asJSON && term.IsTerminal(int(os.Stderr.Fd())) {
				o.Progress = c.App.ErrWriter
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx := c.Context
			var runs []benchResult
			switch {
			case c.Bool("embedded"):
				log := slog.New(slog.DiscardHandler)
				if c.Bool("verbose") {
					log = slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
				}
				runs, err = runEmbeddedBench(ctx, o, log)
			case o.Target == "":
				return errors.New("bench: --target or --embedded is required")
			default:
				o.Label = o.Target
				var r benchResult
				r, err = runBench(ctx, o)
				runs = append(runs, r)
				if err == nil && c.String("compare") != "" {
					o.Target, o.Label = c.String("compare"), c.String("compare")
					r, err = runBench(ctx, o)
					runs = append(runs, r)
				}
			}
			if err != nil {
				return err
			}
			w := c.App.Writer
			if asJSON {
				return printBenchJSON(w, runs)
			}
			if len(runs) == 1 {
				printBench(w, runs[0])
			} else {
				printBenchComparison(w, runs[0], runs[1])
			}
			return nil
		},
	}
}

// benchOptions configure one runBench.
type benchOptions struct {
	Target             string
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
	Answered     int      `json:"answered"`
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	Seconds      float64  `json:"seconds"`
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
}

// benchPlan returns, for every submit in order, the index of its key: a
// new one, or with probability d an earlier one.
func benchPlan(count int, d float64) (plan []int, dups int) {
	rnd := mrand.New(mrand.NewPCG(1, 2))
	plan = make([]int, count)
	fresh := 0
	for i := range plan {
		// Spread the duplicates evenly: submit i is one when the running
		// total floor((i+1)·d) grows.
		if fresh > 0 && int(float64(i+1)*d) > int(float64(i)*d) {
			plan[i] = rnd.IntN(fresh)
			dups++
			continue
		}
		plan[i] = fresh
		fresh++
	}
	return plan, dups
}

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "b" + hex.EncodeToString(b[:]) + "-"
}

type benchSample struct {
	lat    []time.Duration
	status map[smpp.Status]int
	errs   int
	sample []string
}

// runBench binds o.Binds sessions to o.Target and sends o.Count submits
// through them, o.Window outstanding per session.
func runBench(ctx context.Context, o benchOptions) (benchResult, error) {
	if err := o.validate(); err != nil {
		return benchResult{}, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = randomPrefix()
	}
	plan, dups := benchPlan(o.Count, o.Duplicates)
	res := benchResult{Label: o.Label, Target: o.Target, Binds: o.Binds, Window: o.Window, Count: o.Count, DuplicateSubmits: dups, Statuses: map[string]int{}}

	clients := make([]*esme.Client, o.Binds)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	var g sync.WaitGroup
	bindErrs := make([]error, o.Binds)
	for i := range clients {
		g.Go(func() {
			clients[i], bindErrs[i] = esme.Dial(ctx, o.Target, esme.Options{
				SystemID: o.SystemID, Password: o.Password, Bind: smpp.BindTransceiver, Window: o.Window, Timeout: o.Timeout,
			})
		})
	}
	g.Wait()
	if err := errors.Join(bindErrs...); err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}

	var bar *progressbar.ProgressBar
	var done atomic.Int64
	stopBar := make(chan struct{})
	barDone := make(chan struct{})
	if o.Progress != nil {
		bar = progressbar.NewOptions(o.Count, progressbar.OptionSetWriter(o.Progress),
			progressbar.OptionSetDescription(o.Label), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("submits"), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
		go func() {
			defer close(barDone)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopBar:
					_ = bar.Set64(done.Load())
					_ = bar.Finish()
					return
				case <-t.C:
					_ = bar.Set64(done.Load())
				}
			}
		}()
	} else {
		close(barDone)
	}

	jobs := make(chan int)
	go func() {
		defer close(jobs)
		var lim *rate.Limiter
		if o.Rate > 0 {
			lim = rate.NewLimiter(rate.Limit(o.Rate), max(1, int(o.Rate/10)))
		}
		for _, k := range plan {
			if lim != nil && lim.Wait(ctx) != nil {
				return
			}
			select {
			case jobs <- k:
			case <-ctx.Done():
				return
			}
		}
	}()

	var rc *receiptCounter
	if o.Receipts {
		rc = countReceipts(clients)
		defer rc.stop()
	}
	workers := o.Binds * o.Window
	samples := make([]benchSample, workers)
	start := time.Now()
	for w := range workers {
		c := clients[w%o.Binds]
		s := &samples[w]
		s.status = map[smpp.Status]int{}
		g.Go(func() {
			for k := range jobs {
				key := o.KeyPrefix + strconv.Itoa(k)
				sub := esme.Submit{
					Src: "Bench", SrcTON: 5, Dst: fmt.Sprintf("4479%08d", k), DstTON: 1, DstNPI: 1,
					Text: []byte("bench message " + key),
				}
				if !o.NoKey {
					sub.Key, sub.KeyTag = key, o.KeyTag
				}
				if o.Receipts {
					sub.RegisteredDelivery = 1
				}
				t0 := time.Now()
				r, err := c.Submit(ctx, sub)
				if err != nil {
					s.errs++
					if len(s.sample) < 3 {
						s.sample = append(s.sample, err.Error())
					}
				} else {
					s.lat = append(s.lat, time.Since(t0))
					s.status[r.Status]++
				}
				done.Add(1)
			}
		})
	}
	g.Wait()
	elapsed := time.Since(start)
	close(stopBar)
	<-barDone

	var all []time.Duration
	for _, s := range samples {
		all = append(all, s.lat...)
		res.Errors += s.errs
		for st, n := range s.status {
			res.Statuses[st.String()] += n
		}
		for _, e := range s.sample {
			if len(res.ErrorSamples) < 5 {
				res.ErrorSamples = append(res.ErrorSamples, e)
			}
		}
	}
	res.Answered = len(all)
	res.Seconds = elapsed.Seconds()
	if res.Seconds > 0 {
		res.Throughput = float64(res.Answered) / res.Seconds
	}
	res.LatencyMS = percentiles(all)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: interrupted: %w", err)
	}
	if rc != nil {
		n, perSec := rc.wait(ctx, cmp.Or(o.ReceiptQuiet, time.Second), o.Timeout)
		res.Receipts, res.ReceiptsPerSecond = &n, perSec
	}
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, c := range clients {
		_ = c.Unbind(ectx)
	}
	return res, nil
}

// receiptCounter counts the delivery receipts the bench's clients receive
// (they acknowledge them by themselves).
type receiptCounter struct {
	done        chan struct{}
	wg          sync.WaitGroup
	mu          sync.Mutex
	n           int
	first, last time.Time
}

func countReceipts(clients []*esme.Client) *receiptCounter {
	rc := &receiptCounter{done: make(chan struct{})}
	for _, c := range clients {
		rc.wg.Go(func() {
			for {
				select {
				case d := <-c.Receipts():
					if d.IsReceipt() {
						rc.add(time.Now())
					}
				case <-c.Done():
					return
				case <-rc.done:
					return
				}
			}
		})
	}
	return rc
}

func (rc *receiptCounter) add(at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.n == 0 {
		rc.first = at
	}
	rc.n++
	rc.last = at
}

// wait returns the receipts received once none came for quiet (or limit
// passed), and their rate from the first to the last.
func (rc *receiptCounter) wait(ctx context.Context, quiet, limit time.Duration) (int, float64) {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(quiet / 10)
	defer t.Stop()
	lastSeen, since := -1, time.Now()
	for {
		rc.mu.Lock()
		n, first, last := rc.n, rc.first, rc.last
		rc.mu.Unlock()
		if n != lastSeen {
			lastSeen, since = n, time.Now()
		}
		if time.Since(since) >= quiet || time.Now().After(deadline) || ctx.Err() != nil {
			rate := 0.0
			if span := last.Sub(first).Seconds(); n > 1 && span > 0 {
				rate = float64(n) / span
			}
			return n, rate
		}
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (rc *receiptCounter) stop() {
	close(rc.done)
	rc.wg.Wait()
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

const (
	benchSMSCUser = "bench"
	benchSMSCPass = "smsc-pw"
	benchAccount  = "bench"
	benchPassword = "bench-pw"
)

// runEmbeddedBench starts an SMSC simulator and a proxy in process and
// runs the same load twice: directly against the simulator, then through
// the proxy (whose upstream has the same binds and window).
func runEmbeddedBench(ctx context.Context, o benchOptions, log *slog.Logger) ([]benchResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sc := sim.Config{SystemID: benchSMSCUser, Password: benchSMSCPass, KeyTag: o.KeyTag, Logger: log.With("component", "smsc-sim")}
	if o.Receipts {
		sc.DLRDelay = 200 * time.Millisecond // after the proxy recorded the message id (an earlier one is kept unmatched, then matched later)
	}
	s, err := sim.Start("127.0.0.1:0", sc)
	if err != nil {
		return nil, fmt.Errorf("bench: simulator: %w", err)
	}
	defer s.Close()
	run := func(label, target, user, pass string) (benchResult, error) {
		ro := o
		ro.Label, ro.Target, ro.SystemID, ro.Password = label, target, user, pass
		ro.KeyPrefix = randomPrefix()
		before := s.Total()
		r, err := runBench(ctx, ro)
		reached := s.Total() - before
		dups := 0
		for k, n := range s.Counts() {
			if n > 1 && strings.HasPrefix(k, ro.KeyPrefix) {
				dups++
			}
		}
		r.ReachedSMSC, r.DuplicatesAtSMSC = &reached, &dups
		return r, err
	}
	// Directly first, before the proxy binds to the simulator with the same
	// system_id (it would take a share of the direct run's receipts).
	direct, err := run("direct to SMSC", s.Addr(), benchSMSCUser, benchSMSCPass)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "smppproxy-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir) // after app.Shutdown below has closed the store

	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Admin.Address = "127.0.0.1:0"
	cfg.Store.Path = dir
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = benchAccount, benchPassword, []string{"smsc"}
	acc.MaxBinds, acc.Window = max(acc.MaxBinds, o.Binds), o.Window
	acc.Idempotency.TLVTag = config.Tag(o.KeyTag)
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = "smsc", s.Addr(), benchSMSCUser, benchSMSCPass
	up.Binds, up.Window = o.Binds, o.Window
	up.ResponseTimeout = config.Duration(o.Timeout)
	// A benchmark measures; it must not shed load because some binds are
	// still coming up or the machine is busy.
	up.RouteWait = config.Duration(o.Timeout)
	acc.Idempotency.InflightWait = config.Duration(o.Timeout)
	up.ForwardKeyTLV = true // so the simulator counts per key
	cfg.Accounts, cfg.Upstreams = []config.Account{acc}, []config.Upstream{up}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	app, err := proxy.New(proxy.Options{Config: cfg, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = app.Shutdown(sctx)
	}()
	if err := app.Start(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(wctx); err != nil {
		return nil, fmt.Errorf("bench: the proxy did not bind to the simulator: %w", err)
	}

	via, err := run("through smppproxy", app.Addr(), benchAccount, benchPassword)
	if err != nil {
		return nil, err
	}
	return []benchResult{direct, via}, nil
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
	fmt.Fprintf(w, "\n  statuses, %s: %s\n", a.Label, statusSummary(a.Statuses))
	fmt.Fprintf(w, "  statuses, %s: %s\n", b.Label, statusSummary(b.Statuses))
	for _, r := range []benchResult{a, b} {
		for _, e := range r.ErrorSamples {
			fmt.Fprintf(w, "  error, %s: %s\n", r.Label, e)
		}
	}
}
