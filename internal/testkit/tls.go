package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throw-away certificate authority for one test: it issues
// certificates for 127.0.0.1 valid for an hour either side of now.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // trusts Cert alone: a client's RootCAs
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smppproxy test CA"},
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, key := issue(t, tmpl, nil, nil)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Server issues a server certificate for 127.0.0.1.
func (ca *CA) Server(t testing.TB) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	cert, key := issue(t, tmpl, ca.Cert, ca.Key)
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// ServerFiles issues a server certificate for 127.0.0.1 and writes it and
// its key as PEM files server.crt and server.key into dir.
func (ca *CA) ServerFiles(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	c := ca.Server(t)
	kb, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writePEM(t, filepath.Join(dir, "server.crt"), "CERTIFICATE", c.Certificate[0])
	keyFile = writePEM(t, filepath.Join(dir, "server.key"), "PRIVATE KEY", kb)
	return certFile, keyFile
}

// CertFile writes the CA's certificate as the PEM file ca.pem into dir.
func (ca *CA) CertFile(t testing.TB, dir string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Cert.Raw)
}

// issue makes a key and a certificate of tmpl signed by parent (tmpl
// itself, self-signed, when parent is nil).
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t testing.TB, file, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
