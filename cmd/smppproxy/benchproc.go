package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"
)

func benchProcessFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "processes", Usage: "three processes on loopback, as a user runs them: this load generator, `smppproxy sim` and `smppproxy serve` (children of this executable); rounds alternate direct and proxied load"},
		&cli.IntFlag{Name: "rounds", Value: 3, Usage: "with --processes: rounds; the table shows the median"},
		&cli.DurationFlag{Name: "duration", Usage: "with --processes: stop every run after this long (--count is then the most sent); 0 = --count submits"},
		&cli.IntFlag{Name: "preload", Usage: "with --processes: push this many fresh keys through the proxy first, then measure its RSS and its start-up time with them in the store"},
		&cli.DurationFlag{Name: "dlr-delay", Value: 200 * time.Millisecond, Usage: "with --processes: the simulator's receipt delay for the receipts rows; 0 = no receipts rows"},
		&cli.BoolFlag{Name: "pprof", Usage: "with --processes: serve /debug/pprof/ on the proxy's admin API (its address is printed)"},
		&cli.StringFlag{Name: "serve-log-level", Value: "info", Usage: "with --processes: the proxy's log level (debug logs every submit decided; info, the default, only what needs an operator)"},
		&cli.BoolFlag{Name: "keep", Usage: "with --processes: keep the temporary directory (configuration, store, child logs); it is always kept on failure"},
		&cli.StringFlag{Name: "postgres", Usage: "with --processes: run the proxy on the shared PostgreSQL store at this `DSN` (a schema of the bench's own, dropped at the end) instead of Badger"},
		&cli.IntFlag{Name: "instances", Value: 1, Usage: "with --processes --postgres: run this many `smppproxy serve` on the one store (each with the upstream binds, the simulator shared); the proxied load's binds are spread over them and the proxied rows are their sum"},
	}
}

// procBenchOptions configure runProcessBench.
type procBenchOptions struct {
	// Load is the load of every run: binds, window, count (or duration),
	// key tag. Target, credentials and duplicates are the harness's.
	Load benchOptions
	// Rounds of direct and proxied runs; the report shows the median.
	Rounds int
	// Rate is the offered rate of the fixed-rate rows (submits/s).
	Rate float64
	// Preload fresh keys are pushed through the proxy before the rounds;
	// then its RSS and its start-up time with them are measured.
	Preload int
	// DLRDelay is the simulator's receipt delay; 0 = no receipt runs.
	DLRDelay time.Duration
	// Pprof turns on admin.pprof in the proxy's configuration.
	Pprof bool
	// LogLevel is the proxy's log.level ("" = info).
	LogLevel string
	// Keep keeps the directory (it is kept on failure anyway).
	Keep bool
	// Postgres, when set, is the DSN of a PostgreSQL database the proxy
	// stores in (store.backend: postgres), in a schema of the bench's
	// own that is dropped at the end.
	Postgres string
	// Instances of `smppproxy serve` sharing the PostgreSQL store (0 or 1:
	// one); the proxied load's binds are spread over them round-robin.
	Instances int
	// TempDir is where the bench's directory is made ("" = os.TempDir()).
	TempDir string
	// Exe is the smppproxy executable run as `Exe ExeArgs... sim|serve
	// ...`, with Env added to this process's environment (tests run
	// their own binary this way).
	Exe     string
	ExeArgs []string
	Env     []string
	// Progress receives a line per step (nil = none).
	Progress io.Writer
}

// processBenchAction is `smppproxy bench --processes`.
func processBenchAction(c *cli.Context, load benchOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !c.IsSet("window") {
		load.Window = 100
	}
	load.Duration = c.Duration("duration")
	o := procBenchOptions{
		Load: load, Rounds: c.Int("rounds"), Rate: load.Rate, Preload: c.Int("preload"),
		DLRDelay: c.Duration("dlr-delay"), Pprof: c.Bool("pprof"), LogLevel: c.String("serve-log-level"), Keep: c.Bool("keep"), Exe: exe,
		Postgres: c.String("postgres"), Instances: c.Int("instances"),
		Progress: c.App.ErrWriter,
	}
	if o.Rate == 0 {
		o.Rate = 5000
	}
	// A Ctrl-C or SIGTERM cancels the runs; the children are then stopped
	// on the way out, like on every other exit path.
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := runProcessBench(ctx, o)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printProcReportJSON(c.App.Writer, rep)
	}
	printProcReport(c.App.Writer, rep)
	return nil
}

// procHarness is one out-of-process bench: its directory, addresses and
// children.
type procHarness struct {
	o              procBenchOptions
	dir            string
	smsc, simStats string
	sim            *childProc
	// serves are the proxy instances; the first is the one preloaded,
	// restarted, profiled and measured.
	serves []*procServe
	// pids of every child started, a restarted proxy's too.
	pids []int
	inv  procInvariants
	// roundsMem samples the measured proxy's memory over the rounds.
	roundsMem *rssSampler
}

// runProcessBench starts the simulator and the proxy as child processes,
// optionally preloads keys and restarts the proxy, runs the rounds and
// returns the report. The children are stopped before it returns, on
// every path; their directory is removed unless o.Keep or a failure.
func runProcessBench(ctx context.Context, o procBenchOptions) (rep procReport, err error) {
	if err := o.validate(); err != nil {
		return rep, err
	}
	h, err := newProcHarness(o)
	if err != nil {
		return rep, err
	}
	defer func() {
		failed := err != nil || !rep.Invariants.Hold()
		rep.Invariants.ChildPIDs = h.pids
		if stopErr := h.close(failed); err == nil {
			err = stopErr
		}
	}()
	if err := h.startSim(ctx); err != nil {
		return rep, err
	}
	for _, sv := range h.serves {
		if _, err := h.startServe(ctx, sv); err != nil {
			return rep, err
		}
	}
	rep = newProcReport(o)
	if o.Preload > 0 {
		if rep.Preload, err = h.preload(ctx); err != nil {
			return rep, err
		}
	}
	h.roundsMem = startRSSSampler(h.serve().pid())
	defer h.roundsMem.stopPeaks() // when a round fails; finish stopped it otherwise
	for i := range o.Rounds {
		h.progress("round %d of %d", i+1, o.Rounds)
		r, err := h.round(ctx)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, r)
	}
	err = h.finish(ctx, &rep)
	return rep, err
}

func (o *procBenchOptions) validate() error {
	switch {
	case o.Rounds < 1:
		return fmt.Errorf("bench: --rounds %d: at least 1", o.Rounds)
	case o.Rate <= 0:
		return fmt.Errorf("bench: --rate %v: the fixed-rate rows need a rate > 0", o.Rate)
	case o.Preload < 0:
		return fmt.Errorf("bench: --preload %d: must not be negative", o.Preload)
	case o.Exe == "":
		return fmt.Errorf("bench: no executable to run the children with")
	case o.Instances > 1 && o.Postgres == "":
		return fmt.Errorf("bench: --instances %d: several instances share a PostgreSQL store (--postgres)", o.Instances)
	case o.Instances > o.Load.Binds:
		return fmt.Errorf("bench: --instances %d: at least one bind each (--binds %d)", o.Instances, o.Load.Binds)
	case o.Instances > 1 && o.Preload > 0:
		return fmt.Errorf("bench: --instances %d: --preload measures one instance", o.Instances)
	}
	return o.Load.validate()
}

// procServe is one `smppproxy serve` of the bench: its configuration,
// addresses and process.
type procServe struct {
	name, id, cfgPath string // id: store.instance_id ("" = the default)
	listen, admin     string
	p                 *childProc
}

// newProcHarness makes the directory and picks the addresses, and writes
// the proxies' configurations.
func newProcHarness(o procBenchOptions) (*procHarness, error) {
	dir, err := os.MkdirTemp(o.TempDir, "smppproxy-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	h := &procHarness{o: o, dir: dir}
	addrs := []*string{&h.smsc, &h.simStats}
	for i := range max(1, o.Instances) {
		sv := &procServe{name: "serve", cfgPath: filepath.Join(dir, "proxy.yaml")}
		if o.Instances > 1 {
			n := strconv.Itoa(i + 1)
			sv.name, sv.id, sv.cfgPath = "serve-"+n, "bench-"+n, filepath.Join(dir, "proxy-"+n+".yaml")
		}
		h.serves = append(h.serves, sv)
		addrs = append(addrs, &sv.listen, &sv.admin)
	}
	for _, a := range addrs {
		if *a, err = freeLoopbackAddr(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	for _, sv := range h.serves {
		if err := os.WriteFile(sv.cfgPath, []byte(h.proxyConfig(sv)), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	return h, nil
}

const benchDirectUser = "direct"

// proxyConfig is the YAML configuration of the proxy: one account, one
// upstream (the simulator) with the load's binds and window, no
// throughput cap, waits long enough not to shed load on a busy machine.
func (h *procHarness) proxyConfig(sv *procServe) string {
	l := h.o.Load
	return fmt.Sprintf(`listen:
  address: %q
admin:
  address: %q
  pprof: %t
store:
%s
log:
  level: %s
shutdown_timeout: 10s
accounts:
  - system_id: %s
    password: %s
    max_binds: %d
    window: %d
    dlr_window: %d
    route: [smsc]
    idempotency:
      tlv_tag: 0x%04x
      inflight_wait: 10s
upstreams:
  - name: smsc
    address: %q
    system_id: %s
    password: %s
    binds: %d
    window: %d
    throughput: 0
    route_wait: 10s
    response_timeout: 10s
    forward_key_tlv: true
`, sv.listen, sv.admin, h.o.Pprof, h.storeYAML(sv), cmp.Or(h.o.LogLevel, "info"), benchAccount, benchPassword, max(8, 2*l.Binds), l.Window, l.Window,
		l.KeyTag, h.smsc, benchSMSCUser, benchSMSCPass, l.Binds, l.Window)
}

// storeYAML is the store section's body: Badger in the bench's directory,
// or the PostgreSQL database of --postgres in the bench's schema (with
// the instance's id when there are several).
func (h *procHarness) storeYAML(sv *procServe) string {
	if h.o.Postgres == "" {
		return fmt.Sprintf("  path: %q", filepath.Join(h.dir, "store"))
	}
	y := fmt.Sprintf("  backend: postgres\n  dsn: %q\n  schema: %s", h.o.Postgres, h.pgSchema())
	if sv.id != "" {
		y += "\n  instance_id: " + sv.id
	}
	return y
}

// pgSchema is the bench's own PostgreSQL schema (named after its
// directory, so that two benches do not share one).
func (h *procHarness) pgSchema() string {
	return "bench_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(filepath.Base(h.dir)))
}

// dropSchema drops the bench's PostgreSQL schema.
func (h *procHarness) dropSchema() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, h.o.Postgres)
	if err != nil {
		return fmt.Errorf("bench: dropping schema %s: %w", h.pgSchema(), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{h.pgSchema()}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("bench: dropping schema %s: %w", h.pgSchema(), err)
	}
	return nil
}

func (h *procHarness) progress(format string, args ...any) {
	if h.o.Progress != nil {
		fmt.Fprintf(h.o.Progress, "bench: "+format+"\n", args...)
	}
}

// startSim runs `smppproxy sim` and waits until its stats endpoint
// answers (it listens for SMPP before that).
func (h *procHarness) startSim(ctx context.Context) error {
	args := []string{"sim", "--listen", h.smsc, "--stats", h.simStats, "--dlr-delay", h.o.DLRDelay.String()}
	p, err := startChild(h.o, h.dir, "sim", args...)
	if err != nil {
		return err
	}
	h.sim = p
	h.pids = append(h.pids, p.pid())
	return pollUntil(ctx, p, 30*time.Second, "stats endpoint never answered", func(ctx context.Context) bool {
		return httpOK(ctx, "http://"+h.simStats+"/stats?per_key=0")
	})
}

// startServe runs `smppproxy serve` as sv and returns how long it took
// until /readyz answered 200 (the store open, an upstream bind up) and an
// SMPP bind of the bench account succeeded.
func (h *procHarness) startServe(ctx context.Context, sv *procServe) (time.Duration, error) {
	start := time.Now()
	p, err := startChild(h.o, h.dir, sv.name, "serve", "--config", sv.cfgPath)
	if err != nil {
		return 0, err
	}
	sv.p = p
	h.pids = append(h.pids, p.pid())
	err = pollUntil(ctx, p, 5*time.Minute, "never ready", func(ctx context.Context) bool {
		return httpOK(ctx, "http://"+sv.admin+"/readyz") && smppBinds(ctx, sv.listen, benchAccount, benchPassword)
	})
	if err == nil && h.o.Pprof {
		h.progress("%s profiler: http://%s/debug/pprof/", sv.name, sv.admin)
	}
	return time.Since(start), err
}

// serve is the first proxy instance's process.
func (h *procHarness) serve() *childProc { return h.serves[0].p }

// children are the processes started, the proxies first (they drain into
// the simulator).
func (h *procHarness) children() []*childProc {
	var out []*childProc
	for _, sv := range h.serves {
		out = append(out, sv.p)
	}
	return append(out, h.sim)
}

// close stops the children (serve first: it drains into the simulator)
// and removes the directory, or keeps it and says where. A child that
// did not stop cleanly on SIGTERM is an error (and keeps the directory).
func (h *procHarness) close(failed bool) error {
	var errs []error
	for _, p := range h.children() {
		if p == nil {
			continue
		}
		h.progress("stopping %s", p.name)
		if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("bench: %s stopped with %w (its log: %s)", p.name, err, p.logPath))
		}
	}
	h.progress("children stopped")
	if h.o.Postgres != "" && !h.o.Keep {
		errs = append(errs, h.dropSchema())
	}
	err := errors.Join(errs...)
	if failed || err != nil || h.o.Keep {
		w := h.o.Progress
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, "bench: kept %s (proxy*.yaml, store/, sim.log, serve*.log)\n", h.dir)
		return err
	}
	_ = os.RemoveAll(h.dir)
	return nil
}
