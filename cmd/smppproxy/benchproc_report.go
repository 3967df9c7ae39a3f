package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// procInvariants are what must hold whatever the speed: every proxied
// submit answered, no key at the SMSC twice, no acknowledged id changed by
// a retry. (Submits answered with an error are shown, not judged: a busy
// proxy may throttle.)
type procInvariants struct {
	// Over every proxied run, the preload's included.
	ProxiedSubmits  int `json:"proxied_submits"`
	ProxiedAnswered int `json:"proxied_answered"`
	ProxiedAccepted int `json:"proxied_accepted"`
	// Keys the simulator received more than once, over the whole bench.
	DuplicatesAtSMSC int   `json:"duplicates_at_smsc"`
	ReachedSMSC      int64 `json:"reached_smsc"`
	ChangedIDs       int   `json:"changed_ids"`
	// Of the proxy at the end (VmHWM, VmRSS of /proc/PID/status).
	ServePeakRSSKB int64 `json:"serve_peak_rss_kb"`
	ServeRSSKB     int64 `json:"serve_rss_kb"`
	// Over the rounds (after the preload's restart), the peaks of its
	// RSS's anonymous and file-backed parts, sampled.
	ServePeakAnonKB int64 `json:"serve_peak_anon_kb"`
	ServePeakFileKB int64 `json:"serve_peak_file_kb"`
	// The child processes started (all stopped when the bench returns).
	ChildPIDs []int `json:"child_pids"`
}

// Hold reports whether the invariants hold.
func (i procInvariants) Hold() bool {
	return i.ProxiedSubmits > 0 && i.ProxiedAnswered == i.ProxiedSubmits && i.DuplicatesAtSMSC == 0 && i.ChangedIDs == 0
}

// procRow is one line of the table: a figure directly against the SMSC,
// through the proxy, and the proxy's ratio or added latency.
type procRow struct {
	Name    string   `json:"name"`
	Unit    string   `json:"unit"`
	Direct  *float64 `json:"direct,omitempty"`
	Proxied *float64 `json:"proxied,omitempty"`
	// Ratio is proxied/direct (rates); Added is proxied−direct (latency).
	Ratio  *float64 `json:"ratio,omitempty"`
	Added  *float64 `json:"added,omitempty"`
	Target string   `json:"target,omitempty"`
}

// procReport is the out-of-process bench's result.
type procReport struct {
	Date     string  `json:"date"`
	Machine  string  `json:"machine"`
	Rounds   int     `json:"rounds"`
	Count    int     `json:"count"`
	Duration string  `json:"duration,omitempty"`
	Binds    int     `json:"binds"`
	Window   int     `json:"window"`
	Rate     float64 `json:"rate"`
	DLRDelay string  `json:"dlr_delay"`
	LogLevel string  `json:"serve_log_level"`
	// Store is the proxies' store (badger, postgres); Instances how many
	// shared it (the proxied rows are their sum).
	Store     string `json:"store"`
	Instances int    `json:"instances"`
	// Rows are the table: medians over the rounds.
	Rows       []procRow      `json:"rows"`
	Invariants procInvariants `json:"invariants"`
	Preload    *procPreload   `json:"preload,omitempty"`
	Runs       []procRound    `json:"runs"`
}

func newProcReport(o procBenchOptions) procReport {
	r := procReport{
		Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(),
		Rounds: o.Rounds, Count: o.Load.Count, Binds: o.Load.Binds, Window: o.Load.Window, Rate: o.Rate,
		DLRDelay: o.DLRDelay.String(), LogLevel: cmp.Or(o.LogLevel, "info"),
		Store: "badger", Instances: max(1, o.Instances),
	}
	if o.Postgres != "" {
		r.Store = "postgres"
	}
	if o.Load.Duration > 0 {
		r.Duration = o.Load.Duration.String()
	}
	return r
}

// machine is the CPU count and model (from /proc/cpuinfo where there is one).
func machine() string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), model, runtime.Version())
}

// median of the values xs picks from every round.
func (r *procReport) median(x func(procRound) float64) float64 {
	v := make([]float64, 0, len(r.Runs))
	for _, run := range r.Runs {
		v = append(v, x(run))
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func ptr(v float64) *float64 { return &v }

// rateRow compares a rate: proxied/direct.
func (r *procReport) rateRow(name, target string, d, p func(procRound) float64) procRow {
	row := procRow{Name: name, Unit: "/s", Proxied: ptr(r.median(p)), Target: target}
	if d != nil {
		row.Direct = ptr(r.median(d))
		if *row.Direct > 0 {
			row.Ratio = ptr(*row.Proxied / *row.Direct)
		}
	}
	return row
}

// latencyRow compares a latency: proxied−direct.
func (r *procReport) latencyRow(name, target string, d, p func(procRound) float64) procRow {
	row := procRow{Name: name, Unit: "ms", Direct: ptr(r.median(d)), Proxied: ptr(r.median(p)), Target: target}
	row.Added = ptr(*row.Proxied - *row.Direct)
	return row
}

// cpuRow adds a row of CPU time per operation (µs: the proxies', or the
// database's), when it was measured.
func (r *procReport) cpuRow(name string, cpu func(procRound) float64) {
	if v := r.median(cpu); v > 0 {
		r.Rows = append(r.Rows, procRow{Name: name, Unit: "µs", Proxied: ptr(v)})
	}
}

// summarize fills Rows from Runs, Invariants and Preload.
func (r *procReport) summarize() {
	tput := func(b func(procRound) benchResult) func(procRound) float64 {
		return func(x procRound) float64 { return b(x).Throughput }
	}
	lat := func(b func(procRound) benchResult, q func(latencies) float64) func(procRound) float64 {
		return func(x procRound) float64 { return q(b(x).LatencyMS) }
	}
	dSat, pSat := func(x procRound) benchResult { return x.DirectSat }, func(x procRound) benchResult { return x.ProxiedSat }
	dRate, pRate := func(x procRound) benchResult { return x.DirectRate }, func(x procRound) benchResult { return x.ProxiedRate }
	p50, p99 := func(l latencies) float64 { return l.P50 }, func(l latencies) float64 { return l.P99 }
	at := fmt.Sprintf("at %.0f/s offered", r.Rate)
	r.Rows = []procRow{r.rateRow("fresh-key submits/s, saturation", ">= 30000", tput(dSat), tput(pSat))}
	r.cpuRow("proxy CPU per fresh submit", procRound.SubmitCPU)
	r.cpuRow("PostgreSQL CPU per fresh submit", procRound.DBSubmitCPU)
	r.Rows = append(r.Rows,
		r.latencyRow("p50 at saturation", "", lat(dSat, p50), lat(pSat, p50)),
		r.latencyRow("p99 at saturation", "", lat(dSat, p99), lat(pSat, p99)),
		r.rateRow("answered/s "+at, "", tput(dRate), tput(pRate)),
		r.latencyRow("p50 "+at, "added <= 2", lat(dRate, p50), lat(pRate, p50)),
		r.latencyRow("p99 "+at, "added <= 10", lat(dRate, p99), lat(pRate, p99)),
		r.rateRow("retries of acknowledged keys/s", ">= 100000", nil, tput(func(x procRound) benchResult { return x.Retry })),
	)
	r.cpuRow("proxy CPU per retry", procRound.RetryCPU)
	if len(r.Runs) > 0 && r.Runs[0].ProxiedReceipts != nil {
		rcpt := func(b func(procRound) *benchResult) func(procRound) float64 {
			return func(x procRound) float64 { return b(x).ReceiptsPerSecond }
		}
		r.Rows = append(r.Rows, r.rateRow("receipts/s (dlr-delay "+r.DLRDelay+")", ">= 30000",
			rcpt(func(x procRound) *benchResult { return x.DirectReceipts }), rcpt(func(x procRound) *benchResult { return x.ProxiedReceipts })))
		r.cpuRow("proxy CPU per receipt", procRound.ReceiptCPU)
	}
	i := r.Invariants
	r.Rows = append(r.Rows,
		procRow{Name: "proxy peak RSS (VmHWM)", Unit: "MB", Proxied: ptr(mb(i.ServePeakRSSKB)), Target: "<= 150 with 1M keys"},
		procRow{Name: "  its anonymous part's peak", Unit: "MB", Proxied: ptr(mb(i.ServePeakAnonKB))},
		procRow{Name: "  its file-backed part's peak", Unit: "MB", Proxied: ptr(mb(i.ServePeakFileKB))},
		procRow{Name: "keys at the SMSC twice", Unit: "", Proxied: ptr(float64(i.DuplicatesAtSMSC)), Target: "0"},
		procRow{Name: "acknowledged ids changed by a retry", Unit: "", Proxied: ptr(float64(i.ChangedIDs)), Target: "0"},
		procRow{Name: "proxied submits not answered", Unit: "", Proxied: ptr(float64(i.ProxiedSubmits - i.ProxiedAnswered)), Target: "0"},
		procRow{Name: "proxied submits answered with an error", Unit: "", Proxied: ptr(float64(i.ProxiedAnswered - i.ProxiedAccepted))},
	)
	if p := r.Preload; p != nil {
		n := strconv.Itoa(p.Keys)
		r.Rows = append(r.Rows,
			procRow{Name: "preload submits/s (" + n + " keys)", Unit: "/s", Proxied: ptr(p.PerSecond)},
			procRow{Name: "proxy peak RSS after " + n + " keys", Unit: "MB", Proxied: ptr(mb(p.PeakRSSKB)), Target: "<= 150 at 1M"},
			procRow{Name: "  its anonymous part's peak", Unit: "MB", Proxied: ptr(mb(p.PeakAnonKB))},
			procRow{Name: "  its file-backed part's peak", Unit: "MB", Proxied: ptr(mb(p.PeakFileKB))},
			procRow{Name: "start to serving with " + n + " keys", Unit: "s", Proxied: ptr(p.StartupSeconds), Target: "<= 2 at 1M"},
			procRow{Name: "proxy RSS after the restart", Unit: "MB", Proxied: ptr(mb(p.RestartRSSKB))},
		)
	}
}

func mb(kb int64) float64 { return float64(kb) / 1024 }

// format writes v for unit: rates whole, the rest with two decimals.
func format(v *float64, unit string) string {
	switch {
	case v == nil:
		return "-"
	case unit == "/s" || unit == "":
		return strconv.FormatFloat(*v, 'f', 0, 64)
	case unit == "MB":
		return strconv.FormatFloat(*v, 'f', 1, 64)
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func (row procRow) versus() string {
	switch {
	case row.Ratio != nil:
		return fmt.Sprintf("x%.2f", *row.Ratio)
	case row.Added != nil:
		return fmt.Sprintf("%+.2f ms", *row.Added)
	}
	return ""
}

func printProcReport(w io.Writer, r procReport) {
	load := fmt.Sprintf("%d submits", r.Count)
	if r.Duration != "" {
		load = fmt.Sprintf("%s (at most %d submits)", r.Duration, r.Count)
	}
	fmt.Fprintf(w, "smppproxy bench --processes: load generator, `smppproxy serve` and `smppproxy sim` as separate processes on 127.0.0.1\n")
	fmt.Fprintf(w, "%s; %s\n", r.Machine, r.Date)
	fmt.Fprintf(w, "%d binds x window %d on each side; %s per run; median of %d rounds; proxy log level %s\n", r.Binds, r.Window, load, r.Rounds, r.LogLevel)
	if r.Instances > 1 {
		fmt.Fprintf(w, "%d proxy instances on one %s store, the proxied binds spread over them: proxied rows are their sum; memory rows the first's\n", r.Instances, r.Store)
	} else {
		fmt.Fprintf(w, "one proxy instance, %s store\n", r.Store)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-40s %10s %10s %12s  %s\n", "", "direct", "proxied", "proxy", "target")
	for _, row := range r.Rows {
		name := row.Name
		if row.Unit != "" && row.Unit != "/s" {
			name += " (" + row.Unit + ")"
		}
		fmt.Fprintf(w, "  %-40s %10s %10s %12s  %s\n", name, format(row.Direct, row.Unit), format(row.Proxied, row.Unit), row.versus(), row.Target)
	}
	printProcErrors(w, r)
}

// printProcErrors lists the runs that did not get every submit accepted.
func printProcErrors(w io.Writer, r procReport) {
	for i, run := range r.Runs {
		for _, b := range []*benchResult{&run.DirectSat, &run.ProxiedSat, &run.Retry, &run.DirectRate, &run.ProxiedRate, run.DirectReceipts, run.ProxiedReceipts} {
			if b == nil || b.Statuses[smpp.StatusOK.String()] == b.Count {
				continue
			}
			fmt.Fprintf(w, "  round %d, %s: %d of %d accepted; statuses %s; errors %d %v\n",
				i+1, b.Label, b.Statuses[smpp.StatusOK.String()], b.Count, statusSummary(b.Statuses), b.Errors, b.ErrorSamples)
		}
	}
	if !r.Invariants.Hold() {
		fmt.Fprintln(w, "\n  INVARIANTS BROKEN: see the rows above")
	}
}

func printProcReportJSON(w io.Writer, r procReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
