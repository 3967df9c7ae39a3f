package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/proxy"
)

const (
	benchSMSCUser = "bench"
	benchSMSCPass = "smsc-pw"
	benchAccount  = "bench"
	benchPassword = "bench-pw"
)

// benchTarget is where one run sends its load, with which credentials.
type benchTarget struct {
	Label, Addr, User, Pass string
}

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
	// Directly first, before the proxy binds to the simulator with the same
	// system_id (it would take a share of the direct run's receipts).
	direct, err := runCountedBySim(ctx, s, o, benchTarget{"direct to SMSC", s.Addr(), benchSMSCUser, benchSMSCPass})
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "smppproxy-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir) // after the proxy's shutdown below has closed the store
	app, err := startEmbeddedProxy(ctx, embeddedProxyConfig(o, s.Addr(), dir), log)
	if err != nil {
		return nil, err
	}
	defer shutdownEmbeddedProxy(app)
	via, err := runCountedBySim(ctx, s, o, benchTarget{"through smppproxy", app.Addr(), benchAccount, benchPassword})
	if err != nil {
		return nil, err
	}
	return []benchResult{direct, via}, nil
}

// runCountedBySim runs o against t with a fresh key prefix and fills in
// what the simulator s received during the run: submits, and keys of the
// run it received more than once.
func runCountedBySim(ctx context.Context, s *sim.Simulator, o benchOptions, t benchTarget) (benchResult, error) {
	o.Label, o.Target, o.SystemID, o.Password = t.Label, t.Addr, t.User, t.Pass
	o.KeyPrefix = randomPrefix()
	before := s.Total()
	r, err := runBench(ctx, o)
	reached := s.Total() - before
	dups := 0
	for k, n := range s.Counts() {
		if n > 1 && strings.HasPrefix(k, o.KeyPrefix) {
			dups++
		}
	}
	r.ReachedSMSC, r.DuplicatesAtSMSC = &reached, &dups
	return r, err
}

// embeddedProxyConfig is the configuration of the in-process proxy: one
// account, one upstream (the simulator at smsc) with the bench's binds and
// window, the store in dir.
func embeddedProxyConfig(o benchOptions, smsc, dir string) *config.Config {
	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Admin.Address = "127.0.0.1:0"
	cfg.Store.Path = dir
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = benchAccount, benchPassword, []string{"smsc"}
	acc.MaxBinds, acc.Window = max(acc.MaxBinds, o.Binds), o.Window
	acc.Idempotency.TLVTag = config.Tag(o.KeyTag)
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = "smsc", smsc, benchSMSCUser, benchSMSCPass
	up.Binds, up.Window = o.Binds, o.Window
	up.ResponseTimeout = config.Duration(o.Timeout)
	// A benchmark measures; it must not shed load because some binds are
	// still coming up or the machine is busy.
	up.RouteWait = config.Duration(o.Timeout)
	acc.Idempotency.InflightWait = config.Duration(o.Timeout)
	up.ForwardKeyTLV = true // so the simulator counts per key
	cfg.Accounts, cfg.Upstreams = []config.Account{acc}, []config.Upstream{up}
	return cfg
}

// startEmbeddedProxy validates cfg, starts the proxy and waits (up to
// 10s) until it is bound to its upstream. On error nothing is left running.
func startEmbeddedProxy(ctx context.Context, cfg *config.Config, log *slog.Logger) (*proxy.App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	app, err := proxy.New(proxy.Options{Config: cfg, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := app.Start(); err != nil {
		shutdownEmbeddedProxy(app)
		return nil, fmt.Errorf("bench: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(wctx); err != nil {
		shutdownEmbeddedProxy(app)
		return nil, fmt.Errorf("bench: the proxy did not bind to the simulator: %w", err)
	}
	return app, nil
}

// shutdownEmbeddedProxy shuts app down, for up to 10s.
func shutdownEmbeddedProxy(app *proxy.App) {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = app.Shutdown(sctx)
}
