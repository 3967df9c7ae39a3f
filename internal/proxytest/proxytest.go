// Package proxytest starts a proxy with a simulated SMSC on loopback for
// end-to-end tests, in the spirit of net/http/httptest: Config is the
// standard test configuration, StartSim runs a sim.Simulator on
// 127.0.0.1:0, Run starts a proxy and waits for its upstream binds, and
// Start does all three with a real Badger store in t.TempDir. Every handle
// is closed by t.Cleanup. Forwarder is a configurable fake dedup forwarder
// (per-call hook and counters, like franz-go's kfake) for unit tests, and
// Metric reads a counter or gauge from a prometheus registry.
//
// proxytest does not import package proxy (whose own tests use it): Run and
// Start take the proxy's constructor.
package proxytest

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
)

// Account and upstream credentials of Config.
const (
	SystemID = "shop"
	Password = "secret"
	Upstream = "smsc"
)

// Config is a proxy on 127.0.0.1:0 with one account (shop/secret, 20
// binds, window 100) routed to one upstream named smsc at addr (2 binds,
// window 50, 500ms response timeout), its store in dir.
func Config(addr, dir string) *config.Config {
	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Listen.BindTimeout = config.Duration(2 * time.Second)
	cfg.Store.Path = dir
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = SystemID, Password, []string{Upstream}
	acc.MaxBinds = 20
	acc.Window = 100
	cfg.Accounts = []config.Account{acc}
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = Upstream, addr, "proxy", "pw"
	up.Binds, up.Window = 2, 50
	up.ResponseTimeout = config.Duration(500 * time.Millisecond)
	cfg.Upstreams = []config.Upstream{up}
	return cfg
}

// StartSim runs a simulated SMSC on 127.0.0.1:0 until the test ends.
func StartSim(t testing.TB, cfg sim.Config) *sim.Simulator {
	t.Helper()
	s, err := sim.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("sim.Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Proxy is what Run needs of a proxy (*proxy.App).
type Proxy interface {
	Start() error
	WaitUpstreams(ctx context.Context) error
	Close()
}

// UpstreamWait bounds Run's wait for the upstream binds.
const UpstreamWait = 10 * time.Second

// Run builds a proxy with build, starts it, registers its Close with
// t.Cleanup and waits for its upstream binds.
func Run[P Proxy](t testing.TB, build func() (P, error)) P {
	t.Helper()
	p, err := build()
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	if err := p.Start(); err != nil {
		p.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), UpstreamWait)
	defer cancel()
	if err := p.WaitUpstreams(ctx); err != nil {
		t.Fatalf("upstream never bound: %v", err)
	}
	return p
}

// Env is what Start started.
type Env[P Proxy] struct {
	Proxy  P
	Sim    *sim.Simulator
	Config *config.Config
}

// Option adjusts Start's setup before anything runs.
type Option func(*Setup)

// Setup is what Start builds from: the simulator's configuration and a
// hook that edits the proxy's configuration once the simulator's address
// is known.
type Setup struct {
	Sim   sim.Config
	Edit  []func(*config.Config)
	Store string // store directory; t.TempDir() when empty
}

// WithSim sets the simulator's configuration (faults, delays, receipts).
func WithSim(cfg sim.Config) Option { return func(s *Setup) { s.Sim = cfg } }

// WithConfig edits the proxy's configuration before the proxy is built.
func WithConfig(edit func(*config.Config)) Option {
	return func(s *Setup) { s.Edit = append(s.Edit, edit) }
}

// WithStore puts the store in dir (to restart a proxy on the same data).
func WithStore(dir string) Option { return func(s *Setup) { s.Store = dir } }

// Start runs a simulated SMSC and a proxy built by build from Config on
// the simulator's address and a real Badger store, and waits for the
// upstream binds. Everything stops when the test ends.
func Start[P Proxy](t testing.TB, build func(*config.Config) (P, error), opts ...Option) *Env[P] {
	t.Helper()
	var s Setup
	for _, o := range opts {
		o(&s)
	}
	if s.Store == "" {
		s.Store = t.TempDir()
	}
	smsc := StartSim(t, s.Sim)
	cfg := Config(smsc.Addr(), s.Store)
	for _, edit := range s.Edit {
		edit(cfg)
	}
	p := Run(t, func() (P, error) { return build(cfg) })
	return &Env[P]{Proxy: p, Sim: smsc, Config: cfg}
}
