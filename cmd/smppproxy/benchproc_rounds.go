package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/smppproxy/smppproxy/smpp"
)

// procRound is what one round of the out-of-process bench measured.
type procRound struct {
	// Saturation: fresh keys as fast as the windows allow.
	DirectSat  benchResult `json:"direct_saturation"`
	ProxiedSat benchResult `json:"proxied_saturation"`
	// Retry re-submits the keys of ProxiedSat (same content): every
	// acknowledged one must come back with its message id; ChangedIDs
	// counts those that did not.
	Retry      benchResult `json:"proxied_retry"`
	ChangedIDs int         `json:"changed_ids"`
	// At the fixed offered rate.
	DirectRate  benchResult `json:"direct_rate"`
	ProxiedRate benchResult `json:"proxied_rate"`
	// With a receipt asked for on every submit (nil without DLRDelay).
	DirectReceipts  *benchResult `json:"direct_receipts,omitempty"`
	ProxiedReceipts *benchResult `json:"proxied_receipts,omitempty"`
	// The CPU time (user+system) the proxies spent during the proxied
	// saturation run and the proxied receipts run, in seconds (0 where
	// /proc/PID/stat cannot be read).
	SatProxyCPU float64 `json:"proxied_saturation_proxy_cpu_s,omitempty"`
	// SatDBCPU is the CPU time of this machine's PostgreSQL processes
	// during the proxied saturation run, in seconds, when --postgres names
	// a database on this machine (0 otherwise).
	SatDBCPU         float64 `json:"proxied_saturation_db_cpu_s,omitempty"`
	RetryProxyCPU    float64 `json:"proxied_retry_proxy_cpu_s,omitempty"`
	ReceiptsProxyCPU float64 `json:"proxied_receipts_proxy_cpu_s,omitempty"`
}

// SubmitCPU is the proxies' CPU time per fresh submit of the saturation
// run in µs (0 when it was not measured): on a machine whose speed
// varies, or that other work shares, a steadier comparison of two builds
// than the rates.
func (r procRound) SubmitCPU() float64 { return perOp(r.SatProxyCPU, r.ProxiedSat.Count) }

// DBSubmitCPU is PostgreSQL's CPU time per fresh submit of the saturation
// run in µs (0 when it was not measured): what to size the database by.
func (r procRound) DBSubmitCPU() float64 { return perOp(r.SatDBCPU, r.ProxiedSat.Count) }

// RetryCPU is the proxies' CPU time per retry of an acknowledged key in
// µs (0 when it was not measured).
func (r procRound) RetryCPU() float64 { return perOp(r.RetryProxyCPU, r.Retry.Count) }

func perOp(cpu float64, n int) float64 {
	if cpu == 0 || n == 0 {
		return 0
	}
	return cpu / float64(n) * 1e6
}

// ReceiptCPU is the proxies' CPU time per receipt in µs: that of the
// receipts run per submit+receipt less that of the saturation run per
// submit. Unlike the receipts' rate, which follows the submits' (each
// receipt answers a submit of the same run), it is what a receipt costs
// the proxy. 0 when it was not measured.
func (r procRound) ReceiptCPU() float64 {
	rc := r.ProxiedReceipts
	if rc == nil || rc.Receipts == nil || *rc.Receipts == 0 || r.SatProxyCPU == 0 || r.ReceiptsProxyCPU == 0 || r.ProxiedSat.Count == 0 {
		return 0
	}
	perSubmit := r.SatProxyCPU / float64(r.ProxiedSat.Count)
	return (r.ReceiptsProxyCPU - perSubmit*float64(rc.Count)) / float64(*rc.Receipts) * 1e6
}

// proxyCPU is the CPU time (user+system) the proxies have used so far, in
// seconds, from /proc/PID/stat (0 where it cannot be read).
func (h *procHarness) proxyCPU() float64 {
	total := 0.0
	for _, sv := range h.serves {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sv.p.pid()))
		if err != nil {
			return 0
		}
		_, cpu, ok := statCPU(b)
		if !ok {
			return 0
		}
		total += cpu
	}
	return total
}

// dbCPU is the CPU time (user+system) this machine's PostgreSQL processes
// have used so far, in seconds, when --postgres names a database on this
// machine (0 otherwise: a database elsewhere is not measured).
func (h *procHarness) dbCPU() float64 {
	if !localDSN(h.o.Postgres) {
		return 0
	}
	return commandCPU("postgres")
}

// localDSN reports whether dsn names a database on this machine (a
// loopback address or a Unix socket).
func localDSN(dsn string) bool {
	if dsn == "" {
		return false
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return false
	}
	switch h := cfg.Host; {
	case strings.HasPrefix(h, "/"), h == "localhost":
		return true
	default:
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
}

// commandCPU is the CPU time (user+system) used so far by the processes
// whose command is comm, in seconds (those it may read).
func commandCPU(comm string) float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	total := 0.0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if c, cpu, ok := statCPU(b); ok && c == comm {
			total += cpu
		}
	}
	return total
}

// statCPU reads the command and the CPU time (utime+stime, in seconds) of
// a /proc/PID/stat line.
func statCPU(b []byte) (comm string, cpu float64, ok bool) {
	// The command is in parentheses and may hold spaces and parentheses;
	// after it, state is the 3rd field, utime and stime the 14th and 15th.
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", 0, false
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 13 {
		return "", 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return string(b[i+1 : j]), (ut + st) / clockTicks, true
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// procPreload is what --preload measured.
type procPreload struct {
	Keys      int     `json:"keys"`
	Accepted  int     `json:"accepted"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Of the proxy that took the keys, right after them; the peaks of
	// RSS's anonymous and file-backed parts while it took them (sampled).
	PeakRSSKB  int64 `json:"peak_rss_kb"`
	RSSKB      int64 `json:"rss_kb"`
	PeakAnonKB int64 `json:"peak_anon_kb"`
	PeakFileKB int64 `json:"peak_file_kb"`
	// From starting the proxy again on the store until /readyz answered
	// 200 and an SMPP bind succeeded; its RSS then.
	StartupSeconds float64 `json:"startup_seconds"`
	RestartRSSKB   int64   `json:"restart_rss_kb"`
}

func (h *procHarness) direct() benchTarget {
	return benchTarget{"direct", h.smsc, benchDirectUser, "direct"}
}

func (h *procHarness) proxied() benchTarget {
	return benchTarget{"proxied", h.serves[0].listen, benchAccount, benchPassword}
}

// run sends the load to t: fresh keys under a new prefix, no cap, no
// receipts, as adjusted by adjust. A proxy that exited during it is an
// error.
func (h *procHarness) run(ctx context.Context, t benchTarget, adjust func(*benchOptions)) (benchResult, error) {
	o := h.o.Load
	o.Target, o.SystemID, o.Password = t.Addr, t.User, t.Pass
	o.Duplicates, o.Rate, o.Receipts, o.Progress, o.KeyPrefix = 0, 0, false, nil, randomPrefix()
	if adjust != nil {
		adjust(&o)
	}
	o.Label = cmp.Or(o.Label, t.Label)
	proxied := t.Addr == h.serves[0].listen
	if proxied && len(h.serves) > 1 {
		for _, sv := range h.serves {
			o.Targets = append(o.Targets, sv.listen)
		}
	}
	r, err := runBench(ctx, o)
	if err != nil {
		return r, err
	}
	for _, p := range h.children() {
		select {
		case <-p.exited:
			return r, p.exitError()
		default:
		}
	}
	if proxied {
		h.countProxied(r)
	}
	return r, nil
}

// countProxied adds a proxied run to the invariants.
func (h *procHarness) countProxied(r benchResult) {
	h.inv.ProxiedSubmits += r.Count
	h.inv.ProxiedAnswered += r.Answered
	h.inv.ProxiedAccepted += r.Statuses[smpp.StatusOK.String()]
}

// procStep is one run of a round: its target, options and destination.
type procStep struct {
	name   string
	t      benchTarget
	adjust func(*benchOptions)
	dst    *benchResult
	cpu    *float64 // nil, or where the proxies' CPU time over the run goes
	db     *float64 // nil, or where PostgreSQL's CPU time over the run goes
}

// round runs, alternating direct and proxied: saturation, the retry of
// the proxied keys, the fixed rate, and receipts.
func (h *procHarness) round(ctx context.Context) (procRound, error) {
	var r procRound
	prefix := randomPrefix()
	rate := func(o *benchOptions) { o.Rate = h.o.Rate }
	receipts := func(o *benchOptions) { o.Receipts = true }
	steps := []procStep{
		{"direct, saturation", h.direct(), nil, &r.DirectSat, nil, nil},
		{"proxied, saturation", h.proxied(), func(o *benchOptions) { o.KeyPrefix, o.IDs = prefix, true }, &r.ProxiedSat, &r.SatProxyCPU, &r.SatDBCPU},
		{"proxied, retries of the acknowledged keys", h.proxied(), func(o *benchOptions) {
			o.KeyPrefix, o.IDs, o.Duration, o.Count = prefix, true, 0, max(1, r.ProxiedSat.Count)
		}, &r.Retry, &r.RetryProxyCPU, nil},
		{fmt.Sprintf("direct, %.0f/s offered", h.o.Rate), h.direct(), rate, &r.DirectRate, nil, nil},
		{fmt.Sprintf("proxied, %.0f/s offered", h.o.Rate), h.proxied(), rate, &r.ProxiedRate, nil, nil},
	}
	if h.o.DLRDelay > 0 {
		r.DirectReceipts, r.ProxiedReceipts = &benchResult{}, &benchResult{}
		steps = append(steps,
			procStep{"direct, receipts", h.direct(), receipts, r.DirectReceipts, nil, nil},
			procStep{"proxied, receipts", h.proxied(), receipts, r.ProxiedReceipts, &r.ReceiptsProxyCPU, nil})
	}
	for _, s := range steps {
		h.progress("  %s", s.name)
		cpu0, db0 := h.proxyCPU(), 0.0
		if s.db != nil {
			db0 = h.dbCPU()
		}
		res, err := h.run(ctx, s.t, func(o *benchOptions) {
			o.Label = s.name
			if s.adjust != nil {
				s.adjust(o)
			}
		})
		if err != nil {
			return r, fmt.Errorf("%s: %w", s.name, err)
		}
		*s.dst = res
		if cpu1 := h.proxyCPU(); s.cpu != nil && cpu0 > 0 && cpu1 > cpu0 {
			*s.cpu = cpu1 - cpu0
		}
		if s.db != nil && db0 > 0 {
			if db1 := h.dbCPU(); db1 > db0 {
				*s.db = db1 - db0
			}
		}
	}
	r.ChangedIDs = changedIDs(r.ProxiedSat.ids, r.Retry.ids)
	h.inv.ChangedIDs += r.ChangedIDs
	return r, nil
}

// changedIDs counts the keys acknowledged first whose retry was
// accepted with another message id. (A retry answered with an error, say
// ESME_RTHROTTLED, is no changed id: it counts as not accepted.)
func changedIDs(first, retry map[int]string) int {
	n := 0
	for k, id := range first {
		if got, ok := retry[k]; ok && got != id {
			n++
		}
	}
	return n
}

// preload pushes o.Preload fresh keys through the proxy, reads its
// memory, restarts it on the same store and times the start.
func (h *procHarness) preload(ctx context.Context) (*procPreload, error) {
	h.progress("preload: %d keys through the proxy", h.o.Preload)
	pid := h.serve().pid()
	mem := startRSSSampler(pid)
	r, err := h.run(ctx, h.proxied(), func(o *benchOptions) {
		o.Count, o.Duration, o.Progress, o.Label = h.o.Preload, 0, h.o.Load.Progress, "preload"
	})
	anon, file := mem.stopPeaks()
	if err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	p := &procPreload{Keys: h.o.Preload, Accepted: r.Statuses[smpp.StatusOK.String()], Seconds: r.Seconds, PerSecond: r.Throughput,
		PeakAnonKB: anon, PeakFileKB: file}
	p.PeakRSSKB, p.RSSKB = procStatusKB(pid, "VmHWM"), procStatusKB(pid, "VmRSS")
	h.progress("preload: restarting the proxy with %d keys in its store", h.o.Preload)
	if err := h.serve().stop(syscall.SIGTERM, time.Minute); err != nil {
		return p, fmt.Errorf("bench: stopping the proxy for the restart: %w (its log: %s)", err, h.serve().logPath)
	}
	d, err := h.startServe(ctx, h.serves[0])
	p.StartupSeconds = d.Seconds()
	p.RestartRSSKB = procStatusKB(h.serve().pid(), "VmRSS")
	return p, err
}

// finish reads what is measured once at the end: the proxy's memory and
// the keys the simulator received twice.
func (h *procHarness) finish(ctx context.Context, rep *procReport) error {
	pid := h.serve().pid()
	h.inv.ServePeakRSSKB, h.inv.ServeRSSKB = procStatusKB(pid, "VmHWM"), procStatusKB(pid, "VmRSS")
	h.inv.ServePeakAnonKB, h.inv.ServePeakFileKB = h.roundsMem.stopPeaks()
	st, err := fetchSimStats(ctx, h.simStats)
	if err != nil {
		return err
	}
	h.inv.DuplicatesAtSMSC = len(st.Duplicates)
	h.inv.ReachedSMSC = st.Total
	h.inv.ChildPIDs = h.pids
	rep.Invariants = h.inv
	rep.summarize()
	return nil
}
