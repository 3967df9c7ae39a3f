package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// testCA is a throw-away certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smppproxy test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// serverFiles issues a certificate for 127.0.0.1 and writes it and its key
// as PEM files into dir.
func (ca *testCA) serverFiles(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

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
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.serverFiles(t, dir)
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.Listen.TLS = &config.ListenTLS{Address: "127.0.0.1:0", Cert: certFile, Key: keyFile}
	app := startProxy(t, cfg)
	addr := tlsAddr(t, app)

	c, err := esme.Dial(t.Context(), addr, esme.Options{SystemID: "shop", Password: "secret", TLS: &tls.Config{RootCAs: ca.pool}})
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
