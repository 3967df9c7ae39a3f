package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/sdnotify"
	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/proxy"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy",
		Description: "Runs until SIGTERM or SIGINT (a graceful drain; a second signal cuts it short).\n" +
			"SIGHUP, `smppproxy reload` and POST /api/v1/reload re-read the configuration file and apply\n" +
			"accounts, MO routes, upstreams (a changed one binds anew, then its old binds drain) and\n" +
			"log.level; what needs a restart is\n" +
			"logged and not applied. A file that does not parse or validate changes nothing.\n" +
			"Under systemd (Type=notify, $NOTIFY_SOCKET) it sends READY=1 once the listener and the\n" +
			"store are up, RELOADING=1 … READY=1 around a reload, and STOPPING=1 at shutdown.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration `FILE` (YAML); re-read on reload", Required: true},
			&cli.DurationFlag{Name: "records-every", Value: time.Minute, Usage: "period of the store scan behind the records-by-state metric"},
			&cli.BoolFlag{Name: "force-empty-store", Usage: "start even though the store lost data (it is refused otherwise): " +
				"retries of submits recorded in the lost data will be forwarded again; read the README (store damage) first"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err == nil {
				err = cfg.CheckFiles()
			}
			if err != nil {
				return err
			}
			return serve(cfg, serveOptions{
				path: c.String("config"), recordsEvery: c.Duration("records-every"), forceEmptyStore: c.Bool("force-empty-store"),
				logOut: os.Stderr, notify: sdnotify.New(os.Getenv("NOTIFY_SOCKET")),
			})
		},
	}
}

// serveOptions are serve's inputs beside the configuration.
type serveOptions struct {
	path            string // the configuration file, re-read on reload
	recordsEvery    time.Duration
	forceEmptyStore bool
	logOut          io.Writer
	notify          *sdnotify.Notifier
}

// serve runs the proxy until SIGTERM or SIGINT, then shuts it down
// gracefully: the admin API reports not ready, the SMPP listeners close, the
// ESMEs are unbound, submits in flight get their upstream answers (persisted
// before the ESME is answered), the upstream binds are unbound and the store
// is closed. A second signal cuts the drain short. SIGHUP reloads the
// configuration (serving.reload). A store that lost data is refused (exit
// status 1) unless forceEmptyStore.
func serve(cfg *config.Config, o serveOptions) error {
	level := new(slog.LevelVar)
	level.Set(parseLevel(cfg.Log.Level))
	log := newLogger(cfg.Log, level, o.logOut)
	// From the start: a SIGHUP during start-up must not kill the process
	// (its default action), and a SIGTERM then shuts down once started.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	if lim, env := applyMemoryLimit(cfg.MemoryLimit, os.Getenv("GOMEMLIMIT")); env {
		log.Info("memory limit set by GOMEMLIMIT; memory_limit ignored", "limit", memoryLimitString(lim))
	}
	if p, env := applyGCPercent(cfg, os.Getenv("GOGC")); env {
		log.Info("collector target set by GOGC; gc_percent ignored", "percent", p)
	}
	if n, env := applyMaxProcs(cfg, os.Getenv("GOMAXPROCS")); env {
		log.Info("processors set by GOMAXPROCS; max_procs ignored", "procs", n)
	}
	s, err := startServing(cfg, log, o, level)
	if err != nil {
		return err
	}
	defer s.adminLn.Close()
	s.notifyState("READY=1", o.notify.Ready)
	got := s.awaitStop(sig) // (it sends STOPPING=1)
	return s.shutdown(cfg.ShutdownTimeout.Std(), got, sig)
}

// awaitStop answers SIGHUP with a reload until SIGTERM or SIGINT, which
// it returns. Reloads run on a goroutine of their own, SIGHUPs that come
// during one merged into one more: a reload may wait (for the previous
// one's new binds, up to 30 s), and the signals must still be read, or a
// SIGTERM would wait behind it, or be dropped.
func (s *serving) awaitStop(sig <-chan os.Signal) os.Signal {
	hup := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-hup:
				_, _ = s.reload("SIGHUP")
			case <-done:
				return
			}
		}
	}()
	for got := range sig {
		if got != syscall.SIGHUP {
			// Before the reloads' goroutine could start one more, and with
			// no READY=1 of a reload after it.
			s.notifyMu.Lock()
			s.stopping.Store(true)
			s.notifyState("STOPPING=1", s.opts.notify.Stopping)
			s.notifyMu.Unlock()
			return got
		}
		select {
		case hup <- struct{}{}:
		default: // one is pending already: it reads the file as it is then
		}
	}
	return syscall.SIGTERM // not reached: sig is never closed
}

// errShuttingDown refuses a reload asked for once shutdown began.
var errShuttingDown = errors.New("shutting down: reload refused")

// notifyUnlessStopping is notifyState, unless STOPPING=1 was sent: a
// reload's states never follow it.
func (s *serving) notifyUnlessStopping(what string, send func() error) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if !s.stopping.Load() {
		s.notifyState(what, send)
	}
}

// notifyState tells systemd a state; a failure is logged (systemd then
// does not listen) and the proxy goes on.
func (s *serving) notifyState(what string, send func() error) {
	if err := send(); err != nil {
		s.log.Warn("sd_notify failed", "state", what, "err", err)
	}
}

// reload re-reads the configuration file and puts it in force: the log
// level here, the rest by proxy.App.Reload. A file that does not parse or
// validate changes nothing; its problems (file:line) are logged and
// returned. by names who asked ("SIGHUP", "admin API").
func (s *serving) reload(by string) (admin.Reloaded, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.stopping.Load() {
		s.log.Warn("configuration reload refused: shutting down", "by", by)
		return admin.Reloaded{}, errShuttingDown
	}
	s.notifyUnlessStopping("RELOADING=1", s.opts.notify.Reloading)
	defer s.notifyUnlessStopping("READY=1", s.opts.notify.Ready)
	next, err := config.Load(s.opts.path)
	if err == nil {
		err = next.CheckReloadFiles() // (the token and DSN files are read at start only)
	}
	if err != nil {
		s.log.Error("configuration reload refused; nothing changed", "by", by, "err", err)
		return admin.Reloaded{}, err
	}
	for _, w := range next.Warnings() {
		s.log.Warn(w)
	}
	r, err := s.app.Reload(next)
	if err != nil {
		s.log.Error("configuration reload failed; nothing changed", "by", by, "err", err)
		return admin.Reloaded{}, err
	}
	out := admin.Reloaded{Applied: r.Applied, Restart: r.Restart}
	before := debug.SetMemoryLimit(-1)
	if lim, _ := applyMemoryLimit(next.MemoryLimit, os.Getenv("GOMEMLIMIT")); lim != before {
		out.Applied = append(out.Applied, fmt.Sprintf("memory_limit: %s → %s", memoryLimitString(before), memoryLimitString(lim)))
	}
	beforeGC := debug.SetGCPercent(100)
	debug.SetGCPercent(beforeGC)
	if p, _ := applyGCPercent(next, os.Getenv("GOGC")); p != beforeGC {
		out.Applied = append(out.Applied, fmt.Sprintf("gc_percent: %d → %d", beforeGC, p))
	}
	beforeProcs := runtime.GOMAXPROCS(0)
	if n, _ := applyMaxProcs(next, os.Getenv("GOMAXPROCS")); n != beforeProcs {
		out.Applied = append(out.Applied, fmt.Sprintf("max_procs: %d → %d", beforeProcs, n))
	}
	if lvl := parseLevel(next.Log.Level); lvl != s.level.Level() {
		out.Applied = append(out.Applied, fmt.Sprintf("log.level: %s → %s", s.level.Level(), lvl))
		s.level.Set(lvl)
	}
	for _, line := range out.Applied {
		s.log.Info("reload applied", "by", by, "change", line)
	}
	for _, line := range out.Restart {
		s.log.Warn("reload: changed but needs a restart; not applied", "by", by, "change", line)
	}
	s.log.Info("configuration reloaded", "by", by, "file", s.opts.path, "applied", len(out.Applied), "restart", len(out.Restart))
	return out, nil
}

// serving is a started proxy with its admin server and metrics scan.
type serving struct {
	log      *slog.Logger
	level    *slog.LevelVar
	opts     serveOptions
	reloadMu sync.Mutex
	app      *proxy.App
	adminLn  net.Listener
	httpSrv  *http.Server
	httpDone chan struct{}
	// stopping makes /readyz answer 503 from the first signal on.
	stopping atomic.Bool
	// notifyMu orders the setting of stopping and STOPPING=1 with a
	// reload's RELOADING=1 and READY=1 (notifyUnlessStopping).
	notifyMu sync.Mutex
	stopScan context.CancelFunc
	scanDone chan struct{}
}

// startServing opens the store, starts the proxy, its admin API and the
// records-by-state scan. On error nothing is left running.
func startServing(cfg *config.Config, log *slog.Logger, o serveOptions, level *slog.LevelVar) (*serving, error) {
	var token string
	if cfg.Admin.TokenFile != "" {
		t, err := admin.ReadToken(cfg.Admin.TokenFile)
		if err != nil {
			return nil, err
		}
		token = t
	}
	adminLn, err := net.Listen("tcp", cfg.Admin.Address)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Admin.Address, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	app, err := proxy.New(proxy.Options{Config: cfg, Logger: log, Registerer: reg, ForceEmptyStore: o.forceEmptyStore,
		Metrics: proxy.MetricsOptions{RecordsEvery: o.recordsEvery}})
	if err != nil {
		adminLn.Close()
		return nil, err
	}
	s := &serving{log: log, level: level, opts: o, app: app, adminLn: adminLn}
	s.startAdmin(cfg, token, reg)
	if err := app.Start(); err != nil {
		app.Close()
		_ = s.httpSrv.Close()
		adminLn.Close()
		return nil, err
	}
	log.Info("admin API listening", "address", adminLn.Addr().String(), "token", token != "")
	scanCtx, stopScan := context.WithCancel(context.Background())
	s.stopScan, s.scanDone = stopScan, make(chan struct{})
	go func() {
		defer close(s.scanDone)
		app.Metrics().Run(scanCtx)
	}()
	return s, nil
}

// startAdmin serves the admin API on s.adminLn. NewServer sets the
// timeouts and warns when mutations will be refused (no token, not
// loopback).
func (s *serving) startAdmin(cfg *config.Config, token string, reg *prometheus.Registry) {
	app := s.app
	s.httpSrv = admin.NewServer(s.adminLn, admin.Config{
		Sessions: &app.Sessions, Store: app.Store(), Resolver: app.Engine(), Receipts: app.Receipts(), Gatherer: reg,
		Ready: func() error {
			if s.stopping.Load() {
				return errors.New("shutting down")
			}
			return app.Ready()
		},
		Token: token, Pprof: cfg.Admin.Pprof, Logger: s.log.With("component", "admin"),
		Operator: app, Status: app,
		Reload: func(context.Context) (admin.Reloaded, error) {
			return s.reload("admin API")
		},
	})
	s.httpDone = make(chan struct{})
	go func() {
		defer close(s.httpDone)
		if err := s.httpSrv.Serve(s.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server failed", "err", err)
		}
	}()
}

// shutdown drains the proxy for up to timeout after signal got; a
// second SIGTERM/SIGINT on sig ends the drain at once.
func (s *serving) shutdown(timeout time.Duration, got os.Signal, sig <-chan os.Signal) error {
	log := s.log
	log.Info("shutting down", "signal", got.String(), "timeout", timeout)
	s.stopping.Store(true)
	s.stopScan()
	<-s.scanDone
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		// A second SIGTERM/SIGINT ends the drain at once; SIGHUP is ignored.
		for got := range sig {
			if got != syscall.SIGHUP {
				log.Warn("second signal: closing the remaining sessions now", "signal", got.String())
				cancel()
				return
			}
		}
	}()
	// Last resort: a drain that outlives twice its budget is a bug; every
	// acknowledged record is already synced, so exiting is safe.
	watchdog := time.AfterFunc(2*timeout+time.Second, func() {
		log.Error("shutdown did not finish in twice shutdown_timeout; exiting")
		os.Exit(1)
	})
	defer watchdog.Stop()
	err := s.app.Shutdown(ctx)
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	defer hcancel()
	_ = s.httpSrv.Shutdown(hctx)
	<-s.httpDone
	switch {
	case err == nil:
		log.Info("stopped")
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The drain ran out of time: the remaining sessions were closed, and
		// everything acknowledged was persisted before it was acknowledged.
		log.Warn("stopped; the drain was cut short and the remaining sessions were closed", "err", err)
		return nil
	default:
		return fmt.Errorf("shutdown: %w", err)
	}
}

// parseLevel is log.level as a slog.Level (info when empty; config
// validates it).
func parseLevel(s string) slog.Level {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(s))
	return lvl
}

// newLogger writes to w in l's format at level (a reload changes it).
func newLogger(l config.Log, level slog.Leveler, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if l.Format == config.LogJSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(logx.NewHandler(h, logx.Options{RedactAddresses: l.RedactAddresses}))
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "configuration tools",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "validate a configuration file; errors name their line",
			Description: "Parses and validates FILE as serve would, and reads the files it names (TLS, token,\n" +
				"DSN), without starting anything: every problem is printed with its file:line, warnings\n" +
				"(plain-text passwords, an admin API open without a token) too. Exit status 0 when the file\n" +
				"is valid.",
			Flags: []cli.Flag{&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "the configuration `FILE` (YAML) to check"}},
			Action: func(c *cli.Context) error {
				cfg, err := config.Load(c.String("config"))
				if err == nil {
					err = cfg.CheckFiles()
				}
				if err != nil {
					return err
				}
				for _, w := range cfg.Warnings() {
					fmt.Fprintln(c.App.Writer, "warning:", w)
				}
				fmt.Fprintf(c.App.Writer, "%s: ok (%d accounts, %d upstreams)\n", c.String("config"), len(cfg.Accounts), len(cfg.Upstreams))
				return nil
			},
		}},
	}
}
