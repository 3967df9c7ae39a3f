package proxy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

func TestDisabledAccountIsUnboundAndRefusedUntilEnabled(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	changed, closed, err := app.DisableAccount("shop")
	if err != nil || !changed || closed != 1 {
		t.Fatalf("DisableAccount(shop) = %v, %d, %v; want changed, 1 session closed", changed, closed, err)
	}
	select {
	case <-shop.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the disabled account's session is still open")
	}
	if st := dialESME(t, app.Addr()).bind(smpp.CmdBindTransceiver, "shop", "secret"); st == smpp.StatusOK {
		t.Fatal("bind of a disabled account succeeded")
	}
	if ls := app.Accounts(); len(ls) != 1 || !ls[0].Disabled || ls[0].Sessions != 0 {
		t.Errorf("Accounts() = %+v, want shop disabled with no session", ls)
	}
	if changed, err := app.EnableAccount("shop"); err != nil || !changed {
		t.Fatalf("EnableAccount(shop) = %v, %v", changed, err)
	}
	if st := dialESME(t, app.Addr()).bind(smpp.CmdBindTransceiver, "shop", "secret"); st != smpp.StatusOK {
		t.Errorf("bind after EnableAccount = %v, want 0", st)
	}
	if _, _, err := app.DisableAccount("nobody"); !errors.Is(err, ErrNoSuchAccount) {
		t.Errorf("DisableAccount(nobody) = %v, want ErrNoSuchAccount", err)
	}
}

func TestDrainedUpstreamKeepsItsBindsAndTakesNoSubmits(t *testing.T) {
	smsc, cfg := simConfig(t, sim.Config{})
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if changed, err := app.DrainUpstream("smsc"); err != nil || !changed {
		t.Fatalf("DrainUpstream(smsc) = %v, %v", changed, err)
	}
	if got := shop.submit(2, keyed("drained-1", "x")); got.Status == smpp.StatusOK {
		t.Fatalf("submit with the only upstream drained = %v, want refused (nothing sent)", got.Status)
	}
	wantSMSCTotal(t, smsc, 0)
	ups := app.Upstreams()
	if len(ups) != 1 || !ups[0].Drained || ups[0].Up == 0 {
		t.Errorf("Upstreams() = %+v, want smsc drained with its binds still up", ups)
	}
	if changed, err := app.ResumeUpstream("smsc"); err != nil || !changed {
		t.Fatalf("ResumeUpstream(smsc) = %v, %v", changed, err)
	}
	if got := shop.submit(3, keyed("drained-1", "x")); got.Status != smpp.StatusOK {
		t.Errorf("retry after ResumeUpstream = %v, want 0 (the refused submit was retryable)", got.Status)
	}
	wantSMSCTotal(t, smsc, 1)
}

func TestThroughputRefusalsAreCountedByAccount(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	cfg.Accounts[0].Throughput = 1 // a burst of 1
	reg := prometheus.NewRegistry()
	app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	throttled := 0
	for i := range 5 {
		if got := shop.submit(uint32(2+i), keyed(fmt.Sprintf("tp-%d", i), "x")); got.Status == smpp.StatusThrottled {
			throttled++
		}
	}
	if throttled == 0 {
		t.Fatal("5 submits at once under throughput 1: none throttled")
	}
	got := metric(t, reg, "smppproxy_esme_throttled_total", map[string]string{"account": "shop", "reason": "throughput"})
	if int(got) != throttled {
		t.Errorf("smppproxy_esme_throttled_total{account=shop,reason=throughput} = %v, want %d", got, throttled)
	}
}

func TestWindowRefusalsAreCountedByAccount(t *testing.T) {
	smsc, cfg := simConfig(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Delay: 300 * time.Millisecond} }})
	cfg.Accounts[0].Window = 1
	reg := prometheus.NewRegistry()
	app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	first := shop.SubmitAsync(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: "w-1", Text: []byte("x")})
	testkit.Eventually(t, 5*time.Second, func() bool { return smsc.Total() == 1 }, "the first submit at the SMSC")
	if got := shop.submit(9, keyed("w-2", "x")); got.Status != smpp.StatusThrottled {
		t.Fatalf("second submit with window 1 full = %v, want ESME_RTHROTTLED", got.Status)
	}
	<-first
	if got := metric(t, reg, "smppproxy_esme_throttled_total", map[string]string{"account": "shop", "reason": "window"}); got != 1 {
		t.Errorf("smppproxy_esme_throttled_total{account=shop,reason=window} = %v, want 1", got)
	}
}
