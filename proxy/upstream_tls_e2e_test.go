package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"encoding/pem"

	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// tlsRelay terminates TLS on 127.0.0.1:0 and relays each connection to a
// plain SMSC: an SMSC reachable only over TLS.
func tlsRelay(t *testing.T, certFile, keyFile, target string) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return l.Addr().String()
}

// An upstream over TLS with a private CA (tls_ca) and a certificate name
// other than the address (tls_server_name) binds and forwards; without the
// CA the bind never succeeds and submits are not sent.
func TestUpstreamOverTLSWithPrivateCA(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.serverFiles(t, dir) // certificate for 127.0.0.1
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	relay := tlsRelay(t, certFile, keyFile, smsc.Addr())
	_, port, _ := net.SplitHostPort(relay)

	cfg := testConfig(t, "localhost:"+port, filepath.Join(dir, "data"))
	cfg.Upstreams[0].TLS = true
	cfg.Upstreams[0].TLSCA = caFile
	cfg.Upstreams[0].TLSServerName = "127.0.0.1"
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if r := c.submit(1, keyed("tls-up-1", "hello")); r.Status != 0 || r.ID == "" {
		t.Fatalf("submit through a TLS upstream = %+v, want accepted", r)
	}
	if smsc.Total() != 1 {
		t.Errorf("SMSC received %d, want 1", smsc.Total())
	}

	// The same SMSC without trusting its CA: never bound, nothing sent.
	cfg2 := testConfig(t, "localhost:"+port, filepath.Join(dir, "data2"))
	cfg2.Upstreams[0].TLS = true
	cfg2.Upstreams[0].TLSServerName = "127.0.0.1"
	cfg2.Upstreams[0].RouteWait = 0
	app2, err := New(Options{Config: cfg2})
	if err != nil {
		t.Fatal(err)
	}
	if err := app2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app2.Close)
	time.Sleep(300 * time.Millisecond)
	for _, s := range app2.Sessions.List() {
		if s.Side == "upstream" && s.State == "bound" {
			t.Fatalf("upstream bound without trusting the SMSC's CA: %+v", s)
		}
	}
	c2 := dialBound(t, app2.Addr(), smpp.CmdBindTransceiver)
	if r := c2.submit(1, keyed("tls-up-2", "hello")); r.Status != smpp.StatusSysErr {
		t.Errorf("submit with an untrusted upstream = %v, want 0x08 (no bind)", r.Status)
	}
	if smsc.Total() != 1 {
		t.Errorf("SMSC received %d, want still 1", smsc.Total())
	}
}
