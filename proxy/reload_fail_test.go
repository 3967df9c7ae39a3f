package proxy

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
)

// slowKeySim is a simulator that answers the submit of key "slow" after
// delay, and tells on arrived when one arrives.
func slowKeySim(t *testing.T, delay time.Duration) (*sim.Simulator, <-chan struct{}) {
	arrived := make(chan struct{}, 1)
	return startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.Key != "slow" {
			return sim.Action{}
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		return sim.Action{Delay: delay}
	}}), arrived
}

func poolNames(app *App) []string {
	var names []string
	for _, p := range app.poolList() {
		names = append(names, p.Name())
	}
	slices.Sort(names)
	return names
}

// A reload that fails (here: an added upstream's tls_ca file is missing,
// which only building its pool finds) changes nothing: the configuration
// in force, the accounts' settings and the upstream pools stay as they
// were, and a later reload still applies what it changes.
func TestAFailedReloadChangesNothing(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	other := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	o := config.UpstreamDefaults()
	o.Name, o.Address, o.SystemID, o.Password = "other", other.Addr(), "proxy", "pw"
	cfg.Upstreams = append(cfg.Upstreams, o)
	cfg.Accounts[0].Route = []string{"smsc", "other"}
	app := startProxy(t, cfg)

	bad := reloaded(t, cfg, func(c *config.Config) {
		c.Upstreams = c.Upstreams[:1] // other removed
		s := config.UpstreamDefaults()
		s.Name, s.Address, s.SystemID, s.Password = "secure", smsc.Addr(), "proxy", "pw"
		s.TLS, s.TLSCA = true, filepath.Join(t.TempDir(), "missing-ca.pem")
		c.Upstreams = append(c.Upstreams, s)
		c.Accounts[0].Route = []string{"smsc", "secure"}
		c.Accounts[0].Throughput = 7
	})
	if _, err := app.Reload(bad); err == nil {
		t.Fatal("a reload with a missing tls_ca succeeded")
	}
	if app.config() != cfg {
		t.Errorf("after a failed reload the configuration in force is the new one (throughput %d, %d upstreams), want the old", app.config().Accounts[0].Throughput, len(app.config().Upstreams))
	}
	if got := poolNames(app); !slices.Equal(got, []string{"other", "smsc"}) {
		t.Errorf("pools after a failed reload = %q, want the old ones [other smsc]", got)
	}

	fixed := reloaded(t, cfg, func(c *config.Config) {
		c.Upstreams = c.Upstreams[:1]
		c.Accounts[0].Route = []string{"smsc"}
	})
	if _, err := app.Reload(fixed); err != nil {
		t.Fatal(err)
	}
	app.bg.Wait() // the removed upstream's pool drains and closes
	if got := poolNames(app); !slices.Equal(got, []string{"smsc"}) {
		t.Errorf("pools after removing other = %q, want [smsc]", got)
	}
}

// Removing an upstream the proxy started with leaves the other pools as
// they were. (The metrics shared the proxy's list of pools, and dropping
// the removed one from theirs left a nil pool in the proxy's: its shutdown
// then panicked.)
func TestRemovingAnUpstreamLeavesTheOtherPoolsIntact(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	other := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	o := config.UpstreamDefaults()
	o.Name, o.Address, o.SystemID, o.Password = "other", other.Addr(), "proxy", "pw"
	cfg.Upstreams = append([]config.Upstream{o}, cfg.Upstreams...)
	cfg.Accounts[0].Route = []string{"smsc", "other"}
	app := startProxy(t, cfg)
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) {
		c.Upstreams = c.Upstreams[1:]
		c.Accounts[0].Route = []string{"smsc"}
	})); err != nil {
		t.Fatal(err)
	}
	app.bg.Wait()
	for _, p := range app.poolList() {
		if p == nil {
			t.Fatalf("pools after removing an upstream hold a nil pool")
		}
	}
	if got := poolNames(app); !slices.Equal(got, []string{"smsc"}) {
		t.Errorf("pools after removing other = %q, want [smsc]", got)
	}
}

// While a reload replaces an upstream's pool, its old and new pools are
// one upstream to Prometheus: a scrape succeeds (two series with the same
// labels fail the whole scrape), and its counters do not go down when the
// old pool closes.
func TestMetricsAreScrapedWhileAReloadReplacesAnUpstream(t *testing.T) {
	first, arrived := slowKeySim(t, 2*time.Second)
	second := startSim(t, sim.Config{})
	cfg := testConfig(t, first.Addr(), t.TempDir())
	cfg.Upstreams[0].ForwardKeyTLV = true
	reg := prometheus.NewRegistry()
	app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if r := shop.submit(2, keyed("k-1", "x")); r.Status != smpp.StatusOK {
		t.Fatalf("submit = %v", r.Status)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = shop.call(smpptest.EncodeSubmit(3, keyed("slow", "x")), 10*time.Second)
	}()
	<-arrived // the old pool drains this one after the reload
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = second.Addr() })); err != nil {
		t.Fatal(err)
	}
	written := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape while the upstream's pool is replaced: %v", err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "smppproxy_upstream_requests_written_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no smppproxy_upstream_requests_written_total")
		return 0
	}
	during := written()
	<-done
	app.bg.Wait() // the old pool closed and is no longer exported
	if after := written(); after < during || after < 2 {
		t.Errorf("requests written by the upstream: %v during the swap, %v after it; want at least 2, never going down", during, after)
	}
}

// A submit in flight on an upstream whose pool a reload replaces gets its
// SMSC's answer when it comes within the upstream's response_timeout,
// however short shutdown_timeout is: the old pool is not closed under it
// (which made it unknown, though the SMSC accepted it).
func TestASubmitInFlightDuringAReloadGetsItsLateAnswer(t *testing.T) {
	first, arrived := slowKeySim(t, 3*time.Second)
	second := startSim(t, sim.Config{})
	cfg := testConfig(t, first.Addr(), t.TempDir())
	cfg.ShutdownTimeout = 0
	cfg.Upstreams[0].ForwardKeyTLV = true // the simulator sees the key
	cfg.Upstreams[0].ResponseTimeout = config.Duration(10 * time.Second)
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	done := make(chan resp, 1)
	go func() {
		f, err := shop.call(smpptest.EncodeSubmit(2, keyed("slow", "x")), 15*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- parseResp(f)
	}()
	<-arrived
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = second.Addr() })); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.Status != smpp.StatusOK || got.ID == "" {
		t.Errorf("submit in flight during the reload = %v (id %q), want the SMSC's acceptance (it answers after 3s, response_timeout 10s)", got.Status, got.ID)
	}
}

// An account that a reload moves to an upstream the same reload adds goes
// on using its old route until the new upstream's binds are up: it is
// not left without a route (0x08 to every submit) meanwhile.
func TestAnAccountMovedToAnAddedUpstreamKeepsItsRouteUntilThatOneBinds(t *testing.T) {
	a := startSim(t, sim.Config{})
	cfg := testConfig(t, a.Addr(), t.TempDir())
	app := startProxy(t, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unbound := l.Addr().String()
	l.Close() // nothing answers there: the new upstream does not bind
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) {
		b := config.UpstreamDefaults()
		b.Name, b.Address, b.SystemID, b.Password = "b", unbound, "proxy", "pw"
		c.Upstreams = append(c.Upstreams, b)
		c.Accounts[0].Route = []string{"b"}
	})); err != nil {
		t.Fatal(err)
	}
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if got := shop.submit(2, keyed("k1", "x")); got.Status != smpp.StatusOK {
		t.Errorf("submit while the added upstream binds = %v, want it sent on the old route", got.Status)
	}
	wantSMSCTotal(t, a, 1)
}

// A reload asked for once the proxy shuts down applies nothing: it would
// start upstream binds that nothing closes any more.
func TestAReloadDuringShutdownAppliesNothing(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	other := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	app := startProxy(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := app.Reload(reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = other.Addr() }))
	if !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Reload after Shutdown = %v, want ErrShuttingDown", err)
	}
	if app.config() != cfg {
		t.Error("a reload after Shutdown put its configuration in force")
	}
}

// An upstream's echo_tlv changes only at a restart, however many reloads
// read the changed file, and each of them says so (the second one took the
// first's configuration as running, and said nothing).
func TestEveryReloadLeavesEchoTLVAndSaysItNeedsARestart(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	app := startProxy(t, cfg)
	next := reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].EchoTLV = 0x1501 })
	for i := range 2 {
		r, err := app.Reload(next)
		if err != nil {
			t.Fatal(err)
		}
		if up := app.receipts.Upstreams()["smsc"]; up.EchoTLV != 0 || !slices.Contains(r.Restart, "upstream smsc: echo_tlv") {
			t.Errorf("reload %d: echo_tlv for receipts = 0x%04X, Restart = %q; want 0 and echo_tlv named", i+1, up.EchoTLV, r.Restart)
		}
	}
}

// While a reload's old binds drain, kept receipts wait the longer of the
// old and new response_timeout, a removed upstream's included; once the
// old binds are gone, the new one holds.
func TestKeptReceiptsWaitTheLongerResponseTimeoutWhileOldBindsDrain(t *testing.T) {
	smsc, other, second := startSim(t, sim.Config{}), startSim(t, sim.Config{}), startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.Upstreams[0].ResponseTimeout = config.Duration(time.Minute)
	o := config.UpstreamDefaults()
	o.Name, o.Address, o.SystemID, o.Password = "other", other.Addr(), "proxy", "pw"
	o.ResponseTimeout = config.Duration(2 * time.Minute)
	cfg.Upstreams = append(cfg.Upstreams, o)
	cfg.Accounts[0].Route = []string{"smsc", "other"}
	app := startProxy(t, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unbound := l.Addr().String()
	l.Close() // the new binds do not come up: the old ones stay
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) {
		c.Upstreams = c.Upstreams[:1]
		c.Upstreams[0].ResponseTimeout = config.Duration(10 * time.Second)
		c.Upstreams[0].Address = unbound
		c.Accounts[0].Route = []string{"smsc"}
	})); err != nil {
		t.Fatal(err)
	}
	ups := app.receipts.Upstreams()
	if ups["smsc"].ResponseTimeout != time.Minute || ups["other"].ResponseTimeout != 2*time.Minute {
		t.Errorf("response_timeouts for kept receipts while the old binds drain = %v, %v; want the old 1m and the removed upstream's 2m", ups["smsc"].ResponseTimeout, ups["other"].ResponseTimeout)
	}

	app2 := startProxy(t, testConfig(t, second.Addr(), t.TempDir()))
	cfg2 := app2.config()
	if _, err := app2.Reload(reloaded(t, cfg2, func(c *config.Config) {
		c.Upstreams[0].ResponseTimeout = config.Duration(3 * time.Second)
		c.Upstreams[0].Address = smsc.Addr()
	})); err != nil {
		t.Fatal(err)
	}
	app2.bg.Wait() // the new binds came up, the old ones drained
	if up := app2.receipts.Upstreams()["smsc"]; up.ResponseTimeout != 3*time.Second {
		t.Errorf("response_timeout for kept receipts once the old binds are gone = %v, want 3s", up.ResponseTimeout)
	}
}

// The owner write horizon covers the longest forward: every attempt's
// route_wait, response_timeout and back-off, but no retry past the retry
// budget.
func TestTheOwnerWriteHorizonIsTheLongestForward(t *testing.T) {
	cfg := testConfig(t, "127.0.0.1:1", t.TempDir())
	u := &cfg.Upstreams[0]
	u.RouteWait, u.ResponseTimeout = config.Duration(2*time.Second), config.Duration(10*time.Second)
	u.Retry.Attempts, u.Retry.Budget = 100, 0
	attempt := 13 * time.Second // route_wait + response_timeout + a second of back-off
	if got, want := ownerWriteHorizon(cfg), dedup.OwnerWriteHorizon(100*attempt); got != want {
		t.Errorf("horizon without a budget = %v, want %v (100 attempts)", got, want)
	}
	u.Retry.Budget = config.Duration(5 * time.Second)
	if got, want := ownerWriteHorizon(cfg), dedup.OwnerWriteHorizon(5*time.Second+attempt); got != want {
		t.Errorf("horizon with a 5s budget = %v, want %v (the budget and one attempt)", got, want)
	}
}

// A shutdown is not held by the drain of a pool a reload removed: the
// drain waits for the upstream's response_timeout, and the shutdown closes
// every pool within its own budget.
func TestAShutdownIsNotHeldByAReloadsDrain(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	slow := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.Key == "slow" {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
		}
		return sim.Action{}
	}})
	smsc := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.ShutdownTimeout = config.Duration(100 * time.Millisecond)
	o := config.UpstreamDefaults()
	o.Name, o.Address, o.SystemID, o.Password = "slow", slow.Addr(), "proxy", "pw"
	o.ForwardKeyTLV, o.ResponseTimeout, o.Weight = true, config.Duration(time.Minute), 1
	cfg.Upstreams = []config.Upstream{o}
	cfg.Accounts[0].Route = []string{"slow"}
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	go func() { _, _ = shop.call(smpptest.EncodeSubmit(2, keyed("slow", "x")), time.Minute) }()
	<-arrived
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) {
		u := config.UpstreamDefaults()
		u.Name, u.Address, u.SystemID, u.Password = "smsc", smsc.Addr(), "proxy", "pw"
		c.Upstreams = []config.Upstream{u}
		c.Accounts[0].Route = []string{"smsc"}
	})); err != nil {
		t.Fatal(err)
	}
	// The new binds are up and the routes moved: the old pool drains.
	testkit.Eventually(t, 10*time.Second, func() bool { _, ok := app.poolsByName()["slow"]; return !ok }, "the routes moved to the new binds")
	done := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = app.Shutdown(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // the drain alone would take the minute of response_timeout
		t.Fatal("Shutdown waited for a removed upstream's drain")
	}
}

// An account a reload removes takes its throttle series with it: the
// label values of accounts that are gone do not pile up.
func TestAnAccountRemovedByReloadLeavesNoThrottleSeries(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	reg := prometheus.NewRegistry()
	app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
	series := func() map[string]bool {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		accts := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "smppproxy_esme_throttled_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "account" {
						accts[l.GetValue()] = true
					}
				}
			}
		}
		return accts
	}
	if !series()["shop"] {
		t.Fatal("no throttle series for shop at start")
	}
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) {
		bank := config.AccountDefaults()
		bank.SystemID, bank.Password, bank.Route = "bank", "bankpw", []string{"smsc"}
		c.Accounts = []config.Account{bank}
	})); err != nil {
		t.Fatal(err)
	}
	if got := series(); got["shop"] || !got["bank"] {
		t.Errorf("throttle series by account after shop was removed and bank added: %v; want bank only", got)
	}
}
