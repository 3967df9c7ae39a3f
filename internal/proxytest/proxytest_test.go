package proxytest_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/smpp"
)

// Start gives a proxy bound to its simulated SMSC: a submit through the
// proxy's address reaches the simulator once, and the proxy's metrics are
// readable with Metric.
func TestStartServesASubmitThroughTheSimulator(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := proxytest.Start(t, func(cfg *config.Config) (*proxy.App, error) {
		return proxy.New(proxy.Options{Config: cfg, Registerer: reg})
	}, proxytest.WithSim(sim.Config{}))
	c, err := esme.Dial(t.Context(), env.Proxy.Addr(), esme.Options{SystemID: proxytest.SystemID, Password: proxytest.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Text: []byte("hello")})
	if err != nil || r.Status != smpp.StatusOK {
		t.Fatalf("submit through the proxy = %+v, %v; want status 0", r, err)
	}
	if n := env.Sim.Total(); n != 1 {
		t.Errorf("submits at the simulator = %d, want 1", n)
	}
	if n := proxytest.Metric(t, reg, "smppproxy_dedup_submits_total", map[string]string{"account": proxytest.SystemID}); n != 1 {
		t.Errorf("smppproxy_dedup_submits_total{account=shop} = %v, want 1", n)
	}
}

// Forwarder counts every call and answers with its hook.
func TestForwarderCountsCallsAndAnswersWithItsHook(t *testing.T) {
	f := &proxytest.Forwarder[string, int]{Answer: func(_ context.Context, n int, a string) int { return n * len(a) }}
	if got := f.Forward(t.Context(), "ab"); got != 2 {
		t.Errorf("first call = %d, want 2", got)
	}
	if got := f.Forward(t.Context(), "abc"); got != 6 {
		t.Errorf("second call = %d, want 6", got)
	}
	if f.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2", f.Calls())
	}
	var zero proxytest.Forwarder[string, int]
	if got := zero.Forward(t.Context(), "x"); got != 0 || zero.Calls() != 1 {
		t.Errorf("without a hook = %d after %d calls, want 0 after 1", got, zero.Calls())
	}
}
