package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/route"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// MetricsOptions configure RegisterMetrics. Zero values are the documented
// defaults.
type MetricsOptions struct {
	// RecordsEvery is the period of the scan that counts records by state
	// (default 1 minute). A scrape never scans the store.
	RecordsEvery time.Duration
	// RecordsCap bounds the records one scan visits (default
	// state.DefaultScanCap).
	RecordsCap int
}

// Metrics is what RegisterMetrics registered. Run keeps the records-by-state
// gauge fresh.
type Metrics struct {
	app   *App
	store *state.Metrics
	every time.Duration
}

// instruments are the metrics that sit in the request path and so must be
// created inside New: upstream request latency and responses by status
// (the route members are instrumented pools), store write latency (the
// engine writes through an instrumented store) and the router's retries.
type instruments struct {
	router    *route.Router
	upstreams *smppclient.Metrics
	store     *state.Metrics
}

func newInstruments(pools []*smppclient.Pool, st state.Store) *instruments {
	return &instruments{upstreams: smppclient.NewMetrics(pools...), store: state.NewMetrics(st)}
}

// upstream returns p, instrumented when in is set.
func (in *instruments) upstream(p *smppclient.Pool) route.Upstream {
	if in == nil {
		return p
	}
	return in.upstreams.Instrument(p)
}

// engineStore returns st, instrumented when in is set.
func (in *instruments) engineStore(st state.Store) state.Store {
	if in == nil {
		return st
	}
	return in.store.Instrument(st)
}

// RegisterMetrics registers the proxy's collectors on reg (the idempotency
// engine registered its own in New, on Options.Registerer): ESME sessions by
// account and bind type and closed by reason, upstream binds and their
// counters, the store's group-commit counters and records by state, and —
// when New instrumented the request path — upstream latency, responses by
// status, store write latency and route retries. Call it once, before Start:
// it chains a counting hook onto the server's OnSession (keeping any hook
// already set).
func (a *App) RegisterMetrics(reg prometheus.Registerer, o MetricsOptions) (*Metrics, error) {
	return a.registerMetrics(reg, o, a.instr)
}

func (a *App) registerMetrics(reg prometheus.Registerer, o MetricsOptions, in *instruments) (*Metrics, error) {
	if o.RecordsEvery <= 0 {
		o.RecordsEvery = time.Minute
	}
	if in == nil {
		in = &instruments{}
	}
	up := in.upstreams
	if up == nil {
		up = smppclient.NewMetrics(a.pools...)
	}
	sm := in.store
	if sm == nil {
		sm = state.NewMetrics(a.store)
	}
	sm.ScanCap = o.RecordsCap
	srv := smppserver.NewMetrics(a.server)
	cs := []prometheus.Collector{srv, up, sm}
	if in.router != nil {
		cs = append(cs, route.NewMetrics(in.router))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	return &Metrics{app: a, store: sm, every: o.RecordsEvery}, nil
}

// RefreshRecords recounts the records by state now (one capped scan).
func (m *Metrics) RefreshRecords(ctx context.Context) error { return m.store.RefreshRecords(ctx) }

// Run recounts the records by state at once and then every RecordsEvery,
// until ctx ends or the store is closed.
func (m *Metrics) Run(ctx context.Context) {
	m.store.Run(ctx, m.every, func(err error) {
		m.app.log.Warn("counting records by state failed", "err", err)
	})
}

// ErrNotReady is wrapped by Ready's errors.
var ErrNotReady = errors.New("proxy: not ready")

// Ready reports whether the proxy can take traffic: the store answers and
// every account's route has at least one upstream bind up (SPEC §6).
func (a *App) Ready() error {
	if _, err := a.store.Get(context.Background(), state.Key{Account: "\x00readyz"}); err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("%w: store: %w", ErrNotReady, err)
	}
	up := make(map[string]int, len(a.pools))
	for _, p := range a.pools {
		up[p.Name()] = p.Up()
	}
	for _, acc := range a.cfg.Accounts {
		n := 0
		for _, name := range acc.Route {
			n += up[name]
		}
		if n == 0 {
			return fmt.Errorf("%w: no upstream bind up for the route of account %s", ErrNotReady, acc.SystemID)
		}
	}
	return nil
}
