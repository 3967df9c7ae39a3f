package proxy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// listen.max_connections_per_ip and listen.max_connections reach the
// server: a connection beyond either cap is closed at once, with nothing
// sent, and counted by reason; the connections within the caps are served.
func TestProxyClosesConnectionsBeyondTheConfiguredCaps(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	tests := map[string]struct {
		total, perIP int
	}{
		"max_connections_per_ip": {total: 100, perIP: 1},
		"max_connections":        {total: 1, perIP: 100},
	}
	for reason, tt := range tests {
		t.Run(reason, func(t *testing.T) {
			cfg := testConfig(t, smsc.Addr(), t.TempDir())
			cfg.Listen.MaxConnections, cfg.Listen.MaxConnectionsPerIP = tt.total, tt.perIP
			cfg.Listen.BindTimeout = config.Duration(time.Minute) // only the cap may close it
			reg := prometheus.NewRegistry()
			app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
			first := dialESME(t, app.Addr())
			if st := first.bind(smpp.CmdBindTransceiver, "shop", "secret"); st != smpp.StatusOK {
				t.Fatalf("bind within the caps = %v", st)
			}
			extra := dialESME(t, app.Addr())
			select {
			case <-extra.Done():
			case <-time.After(3 * time.Second):
				t.Fatalf("a connection beyond %s stayed open", reason)
			}
			if got := metric(t, reg, "smppproxy_esme_connections_refused_total", map[string]string{"reason": reason}); got != 1 {
				t.Errorf("smppproxy_esme_connections_refused_total{reason=%q} = %v, want 1", reason, got)
			}
			if r := first.submit(2, keyed("k-1", "hello")); r.Status != smpp.StatusOK {
				t.Errorf("submit on the connection within the caps = %v, want 0", r.Status)
			}
		})
	}
}
