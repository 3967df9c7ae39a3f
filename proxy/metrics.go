package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/internal/buildinfo"
	"github.com/smppproxy/smppproxy/route"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// MetricsOptions configure the records-by-state scan (Options.Metrics).
// Zero values are the documented defaults.
type MetricsOptions struct {
	// RecordsEvery is the period of the scan that counts records by state
	// (default 1 minute). A scrape never scans the store.
	RecordsEvery time.Duration
	// RecordsCap bounds the records one scan visits (default
	// state.DefaultScanCap).
	RecordsCap int
}

// Metrics is the part of the proxy's metrics that needs a loop: Run keeps
// the records-by-state gauge fresh. App.Metrics returns it.
type Metrics struct {
	app   *App
	store *state.Metrics
	every time.Duration
}

// instruments are the metrics that sit in the request path: upstream
// request latency and responses by status (the route members are
// instrumented pools), store write latency and group commits (the engine
// writes through an instrumented store) and the router's retries.
type instruments struct {
	router    *route.Router
	upstreams *smppclient.Metrics
	store     *state.Metrics
}

// newInstruments instruments pools and st; a Badger store reports its
// group commits to them.
func newInstruments(pools []*smppclient.Pool, st state.Store) *instruments {
	in := &instruments{upstreams: smppclient.NewMetrics(pools...), store: state.NewMetrics(st)}
	if b, ok := st.(*state.BadgerStore); ok {
		b.SetCommitObserver(in.store.ObserveCommit)
	}
	return in
}

// upstream returns p, instrumented.
func (in *instruments) upstream(p *smppclient.Pool) route.Upstream {
	return in.upstreams.Instrument(p)
}

// engineStore returns st, instrumented.
func (in *instruments) engineStore(st state.Store) state.Store {
	return in.store.Instrument(st)
}

// registerMetrics registers the collectors New has not registered yet on
// reg (the engine and the receipt service register their own as they are
// built): ESME sessions by account and bind type and closed by reason,
// upstream binds, latency and responses by status, the store's write
// latency, group commits and records by state, and route retries. The
// counts are read from the components at scrape time; no session hook is
// involved.
func (a *App) registerMetrics(reg prometheus.Registerer, o MetricsOptions) error {
	if o.RecordsEvery <= 0 {
		o.RecordsEvery = time.Minute
	}
	in := a.instr
	in.store.ScanCap = o.RecordsCap
	cs := []prometheus.Collector{smppserver.NewMetrics(a.server), in.upstreams, in.store, route.NewMetrics(in.router), buildInfoMetric(a.instance), a.throttles.count}
	if l, ok := a.store.(leaser); ok {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smppproxy_store_lease_held",
			Help: "1 while this instance holds its lease on the shared store (submits are refused with ESME_RSYSERR without one), else 0.",
		}, func() float64 {
			if l.Lease() {
				return 1
			}
			return 0
		}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	a.metrics = &Metrics{app: a, store: in.store, every: o.RecordsEvery}
	return nil
}

// buildInfoMetric is smppproxy_build_info: always 1, labelled with the
// running build (the way Prometheus' own *_build_info metrics are) and
// this instance's id among those sharing a store (one series per
// process: join it to other series on the scrape's instance label).
func buildInfoMetric(instance string) prometheus.Collector {
	in := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "smppproxy_build_info",
		Help: "Always 1; the labels say which build of smppproxy is running, and instance_id which instance it is among those sharing a store.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.ShortRevision(), "goversion": in.GoVersion, "instance_id": instance,
		},
	})
	g.Set(1)
	return g
}

// Metrics returns the records-by-state scan of the metrics New registered.
func (a *App) Metrics() *Metrics { return a.metrics }

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
	if l, ok := a.store.(leaser); ok && !l.Lease() {
		return fmt.Errorf("%w: no lease on the shared store (database unreachable or read-only?)", ErrNotReady)
	}
	if _, err := a.store.Get(context.Background(), state.Key{Account: "\x00readyz"}); err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("%w: store: %w", ErrNotReady, err)
	}
	if w, ok := a.store.(interface{ Writable() error }); ok {
		if err := w.Writable(); err != nil { // reads work, writes do not
			return fmt.Errorf("%w: store: %w", ErrNotReady, err)
		}
	}
	pools := a.poolList()
	up := make(map[string]int, len(pools))
	for _, p := range pools {
		up[p.Name()] += p.Up() // during a reload an upstream may have two pools
	}
	for _, acc := range a.config().Accounts {
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
