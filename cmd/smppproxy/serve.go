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
	"reflect"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/proxy"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration file (YAML)", Required: true},
			&cli.DurationFlag{Name: "records-every", Value: time.Minute, Usage: "period of the store scan behind the records-by-state metric"},
			&cli.BoolFlag{Name: "force-empty-store", Usage: "start even though the store lost data (it is refused otherwise): " +
				"retries of submits recorded in the lost data will be forwarded again; read the README (store damage) first"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return err
			}
			return serve(c.String("config"), cfg, c.Duration("records-every"), c.Bool("force-empty-store"), os.Stderr)
		},
	}
}

// serve runs the proxy until SIGTERM or SIGINT, then shuts it down
// gracefully: the admin API reports not ready, the SMPP listeners close, the
// ESMEs are unbound, submits in flight get their upstream answers (persisted
// before the ESME is answered), the upstream binds are unbound and the store
// is closed. A second signal cuts the drain short. SIGHUP re-reads the
// configuration and reports whether accounts changed, but does not apply
// them (see the README). A store that lost data is refused (exit status 1)
// unless forceEmptyStore.
func serve(path string, cfg *config.Config, recordsEvery time.Duration, forceEmptyStore bool, logOut io.Writer) error {
	log := newLogger(cfg.Log, logOut)
	// From the start: a SIGHUP during start-up must not kill the process
	// (its default action), and a SIGTERM then shuts down once started.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	s, err := startServing(cfg, log, recordsEvery, forceEmptyStore)
	if err != nil {
		return err
	}
	defer s.adminLn.Close()
	var got os.Signal
	for got = range sig {
		if got != syscall.SIGHUP {
			break
		}
		checkReload(log, path, cfg)
	}
	return s.shutdown(cfg.ShutdownTimeout.Std(), got, sig)
}

// serving is a started proxy with its admin server and metrics scan.
type serving struct {
	log      *slog.Logger
	app      *proxy.App
	adminLn  net.Listener
	httpSrv  *http.Server
	httpDone chan struct{}
	// stopping makes /readyz answer 503 from the first signal on.
	stopping atomic.Bool
	stopScan context.CancelFunc
	scanDone chan struct{}
}

// startServing opens the store, starts the proxy, its admin API and the
// records-by-state scan. On error nothing is left running.
func startServing(cfg *config.Config, log *slog.Logger, recordsEvery time.Duration, forceEmptyStore bool) (*serving, error) {
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
	app, err := proxy.New(proxy.Options{Config: cfg, Logger: log, Registerer: reg, ForceEmptyStore: forceEmptyStore,
		Metrics: proxy.MetricsOptions{RecordsEvery: recordsEvery}})
	if err != nil {
		adminLn.Close()
		return nil, err
	}
	s := &serving{log: log, app: app, adminLn: adminLn}
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

// checkReload answers SIGHUP: the configuration is re-read and validated,
// and the log says whether accounts changed. Nothing is applied: accounts
// are bound into sessions, limiters and the request chain when the proxy
// starts (see the README), so a change needs a restart.
func checkReload(log *slog.Logger, path string, running *config.Config) {
	next, err := config.Load(path)
	if err != nil {
		log.Error("SIGHUP: configuration invalid; nothing changed", "err", err)
		return
	}
	if reflect.DeepEqual(accountsOf(next), accountsOf(running)) {
		log.Info("SIGHUP: configuration valid; accounts and upstreams unchanged")
		return
	}
	log.Warn("SIGHUP: configuration valid but accounts or upstreams changed; restart to apply (no hot reload)")
}

func accountsOf(c *config.Config) any {
	return []any{c.Accounts, c.Upstreams}
}

func newLogger(l config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: lvl}
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
			Flags: []cli.Flag{&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true}},
			Action: func(c *cli.Context) error {
				cfg, err := config.Load(c.String("config"))
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
