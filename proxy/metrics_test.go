package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
)

// New registers the proxy's metrics on Options.Registerer in one step:
// closed sessions are counted by reason, the session hooks stay the
// receipt service's; Ready follows the upstream binds.
func TestNewRegistersMetricsAndReadyFollowsBinds(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	reg := prometheus.NewRegistry()
	app, err := New(Options{Config: cfg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	var ups, downs atomic.Int32
	bound := app.server.OnBound
	app.server.OnBound = func(s *smppserver.Session) {
		ups.Add(1)
		bound(s)
	}
	app.server.OnClosed = func(*smppserver.Session) { downs.Add(1) }
	if app.Metrics() == nil {
		t.Fatal("New returned no records-by-state scan")
	}
	if err := app.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready before Start = %v, want ErrNotReady", err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Ready(); err != nil {
		t.Fatalf("Ready with the upstream bound = %v", err)
	}
	c, err := esme.Dial(ctx, app.Addr(), esme.Options{SystemID: "shop", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unbind(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the session-down hook", func() bool { return downs.Load() > 0 })
	if ups.Load() != 1 || downs.Load() != 1 {
		t.Fatalf("earlier hook saw %d up, %d down; want 1 and 1", ups.Load(), downs.Load())
	}
	n, err := testutil.GatherAndCount(reg, "smppproxy_esme_sessions_closed_total")
	if err != nil || n == 0 {
		t.Fatalf("sessions_closed_total: %d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_esme_sessions_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			want := 0.0
			if m.GetLabel()[0].GetValue() == "unbind" {
				want = 1
			}
			if got := m.GetCounter().GetValue(); got != want {
				t.Errorf("sessions_closed_total{reason=%q} = %v, want %v", m.GetLabel()[0].GetValue(), got, want)
			}
		}
	}
}

// The Badger store reports every group commit: the commit latency and
// batch size histograms fill from the first submit.
func TestStoreCommitHistograms(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	app, reg := startReceiptsProxy(t, testConfig(t, smsc.Addr(), t.TempDir()))
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if r := c.submit(1, keyed("hist-1", "x")); r.Status != 0 {
		t.Fatalf("submit = %v", r.Status)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var batches uint64
	for _, mf := range mfs {
		if mf.GetName() == "smppproxy_store_commit_batch_size" {
			batches = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	// create, journal and outcome: at least three writes, in up to three commits.
	if batches < 1 {
		t.Errorf("smppproxy_store_commit_batch_size has %d observations after a submit, want at least 1", batches)
	}
}
