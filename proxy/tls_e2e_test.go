package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// tlsAddr is the address of the proxy's TLS listener (the second one
// Start opens).
func tlsAddr(t *testing.T, app *App) string {
	t.Helper()
	a := app.TLSAddr()
	if a == "" {
		t.Fatal("the proxy has no TLS listener")
	}
	return a
}

// A client over TLS (listen.tls, a certificate issued in
// the test by a throw-away CA) binds, submits and gets its answer; a retry
// over the plain listener is replayed with the same message_id; a client
// that does not trust the certificate never gets to bind.
func TestClientOverTLS(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	ca := testkit.NewCA(t)
	certFile, keyFile := ca.ServerFiles(t, t.TempDir())
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.Listen.TLS = &config.ListenTLS{Address: "127.0.0.1:0", Cert: certFile, Key: keyFile}
	app := startProxy(t, cfg)
	addr := tlsAddr(t, app)

	c, err := esme.Dial(t.Context(), addr, esme.Options{SystemID: "shop", Password: "secret", TLS: &tls.Config{RootCAs: ca.Pool}})
	if err != nil {
		t.Fatalf("bind over TLS: %v", err)
	}
	defer c.Close()
	r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "tls-1", Text: []byte("over TLS")})
	if err != nil || r.Status != 0 || r.MessageID == "" {
		t.Fatalf("submit over TLS = %+v, %v; want accepted with a message_id", r, err)
	}
	if err := c.Unbind(t.Context()); err != nil {
		t.Errorf("unbind over TLS: %v", err)
	}

	plain := dialClients(t, app.Addr(), "shop", "secret", 1, 0)[0]
	again, err := plain.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "tls-1", Text: []byte("over TLS")})
	if err != nil || again.Status != 0 || again.MessageID != r.MessageID {
		t.Errorf("retry over the plain listener = %+v, %v; want the same message_id %q", again, err, r.MessageID)
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("SMSC received %d submits, want 1", n)
	}

	_, err = esme.Dial(t.Context(), addr, esme.Options{SystemID: "shop", Password: "secret", TLS: &tls.Config{}, Timeout: 3 * time.Second})
	var uerr x509.UnknownAuthorityError
	if !errors.As(err, &uerr) {
		t.Errorf("dial with an untrusted certificate = %v, want x509.UnknownAuthorityError", err)
	}
	// Plain SMPP on the TLS port is not a bind.
	raw := dialESME(t, addr)
	if _, err := raw.call(smpp.EncodeSimple(smpp.CmdBindTransceiver, 0, 1, bindBody("shop", "secret")), 3*time.Second); err == nil {
		t.Errorf("a plain-text bind on the TLS listener was answered")
	}
}

// tlsRelay terminates TLS on 127.0.0.1:0 with a certificate of ca for
// 127.0.0.1 and relays each connection to a plain SMSC: an SMSC reachable
// only over TLS. ended counts the relayed connections that have ended (a
// client that refuses the certificate ends its connection in the
// handshake).
func tlsRelay(t *testing.T, ca *testkit.CA, target string) (addr string, ended *atomic.Int32) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Server(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ended = new(atomic.Int32)
	testkit.Serve(t, l, func(c net.Conn) {
		defer ended.Add(1)
		u, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer u.Close()
		up := make(chan struct{})
		go func() { defer close(up); _, _ = io.Copy(u, c); _ = u.Close() }()
		_, _ = io.Copy(c, u)
		_ = c.Close()
		<-up
	})
	return l.Addr().String(), ended
}

// An upstream over TLS with a private CA (tls_ca) and a certificate name
// other than the address (tls_server_name) binds and forwards; without the
// CA the bind never succeeds and submits are not sent.
func TestUpstreamOverTLSWithPrivateCA(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	relay, ended := tlsRelay(t, ca, smsc.Addr()) // certificate for 127.0.0.1
	_, port, _ := net.SplitHostPort(relay)

	cfg := testConfig(t, "localhost:"+port, filepath.Join(dir, "data"))
	cfg.Upstreams[0].TLS = true
	cfg.Upstreams[0].TLSCA = ca.CertFile(t, dir)
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
	before := ended.Load()
	app2, err := New(Options{Config: cfg2})
	if err != nil {
		t.Fatal(err)
	}
	if err := app2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app2.Close)
	testkit.Eventually(t, 10*time.Second, func() bool { return ended.Load() > before }, "no refused upstream handshake ended at the relay")
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
