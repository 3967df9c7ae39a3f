package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/sim"
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
