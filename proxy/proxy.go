// Package proxy wires the smppproxy components together from a
// configuration: the Badger store, the idempotency engine, the upstream
// pools and routes, and the ESME-facing server with its request chain
// (throughput limit → dedup → fallback). cmd/smppproxy and the end-to-end
// tests use it; it holds no protocol logic of its own.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/route"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// Options for New.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// Now is the clock of the idempotency policy windows (unknown_timeout,
	// fingerprint_window), of the records' timestamps, and of routing and
	// the upstream pools (health, retry budget, bind loops, warning rate
	// limits); nil = time.Now. Tests inject one to step past a window
	// instead of sleeping.
	Now func() time.Time
	// Registerer receives every metric of the proxy, registered once by
	// New; nil = a fresh registry.
	Registerer prometheus.Registerer
	// Metrics configures the records-by-state scan (App.Metrics).
	Metrics MetricsOptions
	// Store overrides the configured backend (tests).
	Store state.Store
	// InstanceID distinguishes this process run; empty = store.instance_id,
	// else the host name with a random suffix (InstanceID).
	InstanceID string
	// ForceEmptyStore opens a Badger store that lost data instead of
	// refusing it (state.BadgerOptions.ForceEmpty; serve
	// --force-empty-store).
	ForceEmptyStore bool
	// Secrets keeps the fingerprint secret; nil = state.FileSecret in the
	// configured store path (none without a path: a random secret).
	Secrets state.SecretKeeper
}

// App is a wired proxy.
type App struct {
	cfg      *config.Config
	started  *config.Config // the configuration at start: what restart-only settings are in force
	log      *slog.Logger
	store    state.Store
	engine   *dedup.Engine
	pools    []*smppclient.Pool
	server   *smppserver.Server
	receipts *dlr.Service
	instr    *instruments // metrics in the request path (metrics.go)
	instance string       // Options.InstanceID: this process among those sharing a store
	// sessionInstance is the instance part of this run's upstream session
	// ids (see sessionInstance), the same for every pool of the run.
	sessionInstance string
	reloadedPools   atomic.Uint64    // pools made by reloads: each a part of the session ids of its own
	now             func() time.Time // Options.Now, for the pools a reload builds
	auth            *accountAuth
	throttles       *throttles
	ids             *msgid.IDs
	byName          map[string]*smppclient.Pool // upstream pools by name
	metrics         *Metrics
	Sessions        session.Registry

	mu        sync.Mutex // guards cfg (see config), listeners, pools and byName
	listeners []net.Listener
	reloadMu  sync.Mutex     // serialises Reload
	bg        sync.WaitGroup // a reload's pool swaps (completeSwaps)
	stopBG    chan struct{}  // closed at Shutdown or Close: swaps stop waiting
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New opens the store, recovers records left `sent` by a previous run
// (they become `unknown`), and builds every component. Nothing listens or
// dials until Start.
func New(opts Options) (*App, error) {
	cfg := opts.Config
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	a := &App{cfg: cfg, started: cfg, log: log, stopBG: make(chan struct{})}
	if opts.InstanceID == "" {
		// The store's, the engine's and the upstream sessions' ids agree,
		// and smppproxy_build_info names it.
		opts.InstanceID = InstanceID(cfg)
	}
	a.instance = opts.InstanceID
	a.sessionInstance = sessionInstance(cfg, opts.InstanceID)
	st, secret, err := openStore(opts, log)
	if err != nil {
		return nil, err
	}
	a.store = st
	ids, err := newIDs(cfg)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("proxy: message ids: %w", err)
	}
	byName, err := a.newPools(opts, a.onDeliver)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a.ids, a.byName, a.now = ids, byName, opts.Now
	a.instr = newInstruments(a.pools, st)
	a.instr.router = route.New(route.Config{Routes: a.routes(byName), Logger: log, Now: opts.Now})
	a.engine = dedup.New(dedup.Config{Store: a.instr.engineStore(st), Forwarder: a.instr.router, Logger: log, Metrics: dedup.NewMetrics(reg), InstanceID: opts.InstanceID, IDs: ids, Secret: secret, Now: opts.Now, Owners: ownerLeases(st), Lease: leaseOf(st), CreateFirst: readIsRoundTrip(st), RecentAnswers: cfg.Store.RecentAnswers, OwnerWriteHorizon: ownerWriteHorizon(cfg)})
	if err := a.recover(); err != nil {
		_ = st.Close()
		return nil, err
	}

	a.throttles = newThrottles(cfg.Accounts)
	a.auth = newAccountAuth(log, cfg.Accounts, nil)
	a.auth.usePickKey(secret)
	chain := smppserver.Chain(smppserver.HandlerFunc(unsupported),
		a.leaseGuard(),
		a.throttles.middleware,
		a.engine.Middleware(a.policyOf),
		a.queryCancel(st, ids, log),
	)
	a.server = &smppserver.Server{
		Handler:     chain,
		Auth:        a.auth,
		SystemID:    cfg.ProxySystemID,
		BindTimeout: cfg.Listen.BindTimeout.Std(),
		EnquireLink: cfg.Listen.EnquireLink.Std(),
		MaxPDUSize:  cfg.Listen.MaxPDUSize,
		UnbindWait:  unbindWait(cfg),
		Logger:      log,

		MaxConnections:      cfg.Listen.MaxConnections,
		MaxConnectionsPerIP: cfg.Listen.MaxConnectionsPerIP,
	}
	if a.receipts, err = a.newReceipts(ids, secret, reg); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("proxy: receipts: %w", err)
	}
	a.server.OnBound = a.receipts.OnBound
	a.server.OnClosed = a.auth.sessionClosed
	a.server.OnWindowFull = func(acct string) { a.throttles.count.WithLabelValues(acct, "window").Inc() }
	a.Sessions.Add(serverSource{a.server})
	if err := a.registerMetrics(reg, opts.Metrics); err != nil {
		_ = st.Close()
		return nil, err
	}
	return a, nil
}

// onDeliver hands a deliver_sm or data_sm from an upstream to the
// receipt service. The pools are built before it (it needs the engine,
// which forwards through the pools); they deliver nothing before Start,
// and New has set a.receipts by then.
func (a *App) onDeliver(ctx context.Context, d smppclient.Delivery) smpp.Status {
	return a.receipts.OnDeliver(ctx, d)
}

// routes lists, per account of the configuration in force, the route
// members of its upstreams (those with a pool in byName).
func (a *App) routes(byName map[string]*smppclient.Pool) map[string][]route.Member {
	return a.routesOf(a.config(), byName)
}

// routesOf is routes for cfg's accounts, each upstream's settings from cfg.
func (a *App) routesOf(cfg *config.Config, byName map[string]*smppclient.Pool) map[string][]route.Member {
	routes := map[string][]route.Member{}
	for _, acc := range cfg.Accounts {
		for _, name := range acc.Route {
			if byName[name] == nil {
				continue
			}
			var u config.Upstream
			if c := cfg.Upstream(name); c != nil {
				u = *c
			}
			routes[acc.SystemID] = append(routes[acc.SystemID], route.Member{
				Upstream: a.instr.upstream(byName[name]), Weight: u.Weight, ForwardKeyTLV: u.ForwardKeyTLV,
				Attempts: u.Retry.Attempts, Budget: u.Retry.Budget.Std(),
			})
		}
	}
	return routes
}

// ownerWriteHorizon is how long an owner cut off from the shared store
// may still write a submit's outcome (dedup.Config.OwnerWriteHorizon):
// the longest forward over cfg's upstreams — waiting route_wait for a
// bind, then every attempt's response_timeout, back-off and wait again.
func ownerWriteHorizon(cfg *config.Config) time.Duration {
	return dedup.OwnerWriteHorizon(longestForward(cfg))
}

// longestForward is the longest a submit's forward may take over the
// upstreams of cfg: its attempts, each of route_wait, response_timeout and
// a second, no retry starting past the budget.
func longestForward(cfg *config.Config) time.Duration {
	var longest time.Duration
	for _, u := range cfg.Upstreams {
		attempt := u.RouteWait.Std() + u.ResponseTimeout.Std() + time.Second
		d := time.Duration(max(u.Retry.Attempts, 1)) * attempt
		if b := u.Retry.Budget.Std(); b > 0 {
			d = min(d, b+attempt) // no retry starts past the budget
		}
		longest = max(longest, d)
	}
	return longest
}

// unbindWait is how long a client's unbind waits for its submits in
// flight: the longest a submit is handled (its forward, or a retry's wait
// for the submit in flight), and at least 30 s.
func unbindWait(cfg *config.Config) time.Duration {
	d := longestForward(cfg)
	for _, acc := range cfg.Accounts {
		d = max(d, acc.Idempotency.InflightWait.Std())
	}
	return max(d+5*time.Second, 30*time.Second)
}

// openStore opens the store (opts.Store, else Badger at the configured
// path) and loads the fingerprint secret; the store is closed again when
// the secret cannot be loaded.
func openStore(opts Options, log *slog.Logger) (state.Store, *state.Secret, error) {
	cfg := opts.Config
	st := opts.Store
	keeper := opts.Secrets
	if st == nil && cfg.Store.Backend == config.BackendPostgres {
		pg, err := openPostgres(cfg, opts.InstanceID, log)
		if err != nil {
			return nil, nil, err
		}
		st = pg
		if keeper == nil {
			keeper = pg // one secret for every instance
		}
	}
	if st == nil {
		b, err := state.OpenBadger(state.BadgerOptions{
			Path: cfg.Store.Path, Logger: log, ForceEmpty: opts.ForceEmptyStore,
			MemtableSize: int64(cfg.Store.MemtableSize), NumMemtables: cfg.Store.NumMemtables,
			BlockCacheSize: int64(cfg.Store.BlockCacheSize), IndexCacheSize: int64(cfg.Store.IndexCacheSize),
			ValueThreshold: int64(cfg.Store.ValueThreshold), TableSize: int64(cfg.Store.TableSize),
			CommitDelay: cfg.Store.CommitDelay.Std(),
			NoCommitLog: cfg.Store.CommitLog != nil && !*cfg.Store.CommitLog,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("proxy: open store %s: %w", cfg.Store.Path, err)
		}
		st = b
	}
	if keeper == nil && cfg.Store.Backend == config.BackendBadger && cfg.Store.Path != "" {
		keeper = state.FileSecret{Dir: cfg.Store.Path}
	}
	secret, err := loadSecret(context.Background(), keeper, st, log)
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	return st, secret, nil
}

// newPools builds one upstream pool per configured upstream, by name.
func (a *App) newPools(opts Options, onDeliver func(context.Context, smppclient.Delivery) smpp.Status) (map[string]*smppclient.Pool, error) {
	byName := map[string]*smppclient.Pool{}
	for _, u := range a.cfg.Upstreams {
		p, err := a.newPool(u, a.sessionInstance, opts.Now)
		if err != nil {
			return nil, err
		}
		a.pools = append(a.pools, p)
		byName[u.Name] = p
		a.Sessions.Add(poolSource{p})
	}
	return byName, nil
}

// newPool builds the pool of upstream u (not started).
func (a *App) newPool(u config.Upstream, instance string, now func() time.Time) (*smppclient.Pool, error) {
	tc, err := upstreamTLS(u)
	if err != nil {
		return nil, err
	}
	bind, receivers := u.Bind.Sessions()
	return smppclient.New(smppclient.Config{
		Name: u.Name, Address: u.Address, TLS: tc,
		SystemID: u.SystemID, Password: u.Password, SystemType: u.SystemType,
		Bind: bind, Receivers: receivers, Binds: u.Binds, Window: u.Window, DeliverWindow: u.DeliverWindow, Throughput: float64(u.Throughput),
		ResponseTimeout: u.ResponseTimeout.Std(), RouteWait: u.RouteWait.Std(), EnquireLink: u.EnquireLink.Std(),
		InstanceID: instance, Logger: a.log, Now: now,
		OnDeliver: a.onDeliver,
	}), nil
}

// upstreamTLS is the client TLS configuration of an upstream (nil for
// plain TCP): the system roots or the tls_ca file, and tls_server_name or
// the host of its address.
func upstreamTLS(u config.Upstream) (*tls.Config, error) {
	if !u.TLS {
		return nil, nil
	}
	tc := &tls.Config{ServerName: hostOf(u.Address), MinVersion: tls.VersionTLS12}
	if u.TLSServerName != "" {
		tc.ServerName = u.TLSServerName
	}
	if u.TLSCA != "" {
		pem, err := os.ReadFile(u.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("proxy: upstream %s: tls_ca: %w", u.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("proxy: upstream %s: tls_ca %s: no PEM certificate in it", u.Name, u.TLSCA)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// policyOf is the idempotency policy in force of a bound session's
// account: the one a reload put in force since the bind, else the one it
// bound with.
func (a *App) policyOf(p *smppserver.Principal) dedup.Policy {
	acc := a.auth.account(p.Account)
	if acc == nil {
		acc, _ = p.Value.(*config.Account)
	}
	if acc == nil {
		return dedup.Policy{}
	}
	id := acc.Idempotency
	return dedup.Policy{
		Key: id.Key, TLVTag: uint16(id.TLVTag), MissingKey: id.MissingKey,
		Retention: id.Retention.Std(), FingerprintWindow: id.FingerprintWindow.Std(),
		InflightWait: id.InflightWait.Std(), ConflictStatus: smpp.Status(id.ConflictStatus),
		UnknownStatus: smpp.Status(id.UnknownStatus),
		OnUnknown:     id.OnUnknown, UnknownTimeout: id.UnknownTimeout.Std(),
	}
}

// unsupported is the end of the chain: requests no link handled.
func unsupported(_ context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
	_ = w.WriteFrame(smpp.GenericNack(smpp.StatusInvCmdID, r.Header.Sequence))
}

// throttles enforces each account's submits/s over all its sessions: a
// token bucket whose burst is 10% of the rate (minimum 1); the excess is
// answered ESME_RTHROTTLED at once. set replaces the limits (a reload);
// an account whose limit did not change keeps its bucket.
type throttles struct {
	lim atomic.Pointer[map[string]*rate.Limiter]
	// count is smppproxy_esme_throttled_total: submits (and, for the
	// throughput, query_sm and cancel_sm) answered ESME_RTHROTTLED before
	// the engine saw them, by account and reason.
	count *prometheus.CounterVec
	// accounts is the accounts of the last set (set is serialised: New,
	// then Reload under its lock): a removed one's series are deleted.
	accounts map[string]bool
}

func newThrottles(accts []config.Account) *throttles {
	t := &throttles{count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smppproxy_esme_throttled_total",
		Help: "Submits answered ESME_RTHROTTLED (0x58) by the proxy before they were decided, by account and reason (throughput: the account's submits/s, which query_sm and cancel_sm count against too; window: the session's window was full).",
	}, []string{"account", "reason"})}
	t.set(accts)
	return t
}

func (t *throttles) set(accts []config.Account) {
	old := map[string]*rate.Limiter{}
	if p := t.lim.Load(); p != nil {
		old = *p
	}
	lim := map[string]*rate.Limiter{}
	names := map[string]bool{}
	for _, a := range accts {
		names[a.SystemID] = true
	}
	for name := range t.accounts {
		if !names[name] {
			t.count.DeletePartialMatch(prometheus.Labels{"account": name})
		}
	}
	t.accounts = names
	for _, a := range accts {
		// Every account's series exist from the start, so that increase()
		// sees the first refusal.
		t.count.WithLabelValues(a.SystemID, "throughput")
		t.count.WithLabelValues(a.SystemID, "window")
		if a.Throughput <= 0 {
			continue
		}
		if l := old[a.SystemID]; l != nil && l.Limit() == rate.Limit(a.Throughput) {
			lim[a.SystemID] = l
			continue
		}
		lim[a.SystemID] = rate.NewLimiter(rate.Limit(a.Throughput), max(1, a.Throughput/10))
	}
	t.lim.Store(&lim)
}

// middleware is the link of the request chain that applies the limits.
// The account's throughput counts what it sends upstream: submit_sm, and
// query_sm and cancel_sm, which take the upstream's window slots and
// throughput tokens as a submit does (unlimited, one account could spend
// the capacity the others share).
func (t *throttles) middleware(next smppserver.Handler) smppserver.Handler {
	return smppserver.HandlerFunc(func(ctx context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
		id := r.Header.ID
		query := (id == smpp.CmdQuerySM || id == smpp.CmdCancelSM) && r.Session.BindType().CanTransmit() // (else refused for its bind)
		if id == smpp.CmdSubmitSM || query {
			if l := (*t.lim.Load())[r.Session.Account()]; l != nil && !l.Allow() {
				t.count.WithLabelValues(r.Session.Account(), "throughput").Inc()
				_ = w.WriteStatus(smpp.StatusThrottled)
				return
			}
		}
		next.ServeSMPP(ctx, w, r)
	})
}

// Engine exposes the idempotency engine (for counters).
func (a *App) Engine() *dedup.Engine { return a.engine }

// Receipts exposes the receipt and MO service (counters, unmatched
// receipts).
func (a *App) Receipts() *dlr.Service { return a.receipts }

// Store exposes the store.
func (a *App) Store() state.Store { return a.store }

// Start starts the upstream pools and the SMPP listener(s). The listener
// opens only once the store is open (it is, since New).
func (a *App) Start() error {
	a.receipts.Start()
	for _, p := range a.poolList() {
		p.Start()
	}
	l, err := net.Listen("tcp", a.cfg.Listen.Address)
	if err != nil {
		return fmt.Errorf("proxy: listen %s: %w", a.cfg.Listen.Address, err)
	}
	a.serve(l)
	if t := a.cfg.Listen.TLS; t != nil && t.Address != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return fmt.Errorf("proxy: tls listener: %w", err)
		}
		tl, err := tls.Listen("tcp", t.Address, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err != nil {
			return fmt.Errorf("proxy: listen tls %s: %w", t.Address, err)
		}
		a.serve(tl)
	}
	a.log.Info("smppproxy listening", "address", l.Addr().String())
	return nil
}

func (a *App) serve(l net.Listener) {
	a.mu.Lock()
	a.listeners = append(a.listeners, l)
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.server.Serve(l); err != nil && !errors.Is(err, smppserver.ErrServerClosed) {
			a.log.Error("listener failed", "err", err)
		}
	}()
}

// Addr is the plain SMPP listener's address.
func (a *App) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.listeners) == 0 {
		return ""
	}
	return a.listeners[0].Addr().String()
}

// TLSAddr is the TLS listener's address, "" without one.
func (a *App) TLSAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.listeners) < 2 {
		return ""
	}
	return a.listeners[1].Addr().String()
}

// WaitUpstreams waits until every pool has at least one bound session.
func (a *App) WaitUpstreams(ctx context.Context) error {
	for {
		ready := true
		for _, p := range a.poolList() {
			if p.Up() == 0 {
				ready = false
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Shutdown stops accepting, unbinds the ESMEs and drains in-flight
// submits (their outcomes are persisted), closes the upstream binds and
// then the store. Within ctx; past it everything is closed hard.
func (a *App) Shutdown(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		a.stopBackground()
		// Past the deadline, requests still waiting for an upstream answer
		// must not hold the exit for another response_timeout: closing the
		// pools fails them as session lost, so they are persisted unknown
		// while the store is still open.
		stop := context.AfterFunc(ctx, func() {
			for _, p := range a.poolList() {
				_ = p.Close(ctx)
			}
		})
		err = a.server.Shutdown(ctx)
		stop()
		a.wg.Wait()
		for _, p := range a.poolList() {
			if e := p.Close(ctx); e != nil && err == nil {
				err = e
			}
		}
		a.receipts.Close()
		a.engine.Close()
		if e := a.store.Close(); e != nil && err == nil {
			err = e
		}
	})
	return err
}

// stopBackground stops the background work (a reload's pool swaps) and
// waits for it. A reload past its check of stopBG finishes first (one
// waiting for the previous swaps leaves on stopBG): nothing it starts is
// left behind.
func (a *App) stopBackground() {
	close(a.stopBG)
	a.reloadMu.Lock()
	a.reloadMu.Unlock()
	a.bg.Wait()
}

// Close stops everything at once (what a crash looks like to clients,
// except that the store is closed cleanly).
func (a *App) Close() {
	a.closeOnce.Do(func() {
		a.stopBackground()
		_ = a.server.Close()
		a.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, p := range a.poolList() {
			_ = p.Close(ctx)
		}
		a.receipts.Close()
		a.engine.Close()
		_ = a.store.Close()
	})
}

type serverSource struct{ s *smppserver.Server }

func (s serverSource) Sessions() []session.Info {
	var out []session.Info
	for _, ss := range s.s.Sessions() {
		out = append(out, session.Info{
			ID: ss.ID(), Side: session.SideESME, Owner: ss.Account(), Bind: ss.BindType().String(),
			Remote: ss.RemoteAddr().String(), State: map[bool]string{true: "bound", false: "open"}[ss.BindType() != smpp.BindNone],
			Since: ss.BoundAt(), InFlight: ss.InFlight(), Requests: ss.Requests(),
		})
	}
	return out
}

func (s serverSource) Kick(id string) bool {
	if ss := s.s.Session(id); ss != nil {
		ss.Kick()
		return true
	}
	return false
}

type poolSource struct{ p *smppclient.Pool }

func (p poolSource) Sessions() []session.Info {
	var out []session.Info
	for _, si := range p.p.Sessions() {
		out = append(out, session.Info{
			ID: si.ID, Side: session.SideUpstream, Owner: p.p.Name(), Bind: si.Bind.Name(), State: si.State.String(),
			Since: si.BoundSince, InFlight: si.InFlight, Window: si.Window, Requests: si.Submits, LastError: si.LastError,
		})
	}
	return out
}

func (p poolSource) Kick(string) bool { return false }
