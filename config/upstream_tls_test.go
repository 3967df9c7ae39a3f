package config

import (
	"strings"
	"testing"
)

func TestUpstreamTLSKeysNeedTLS(t *testing.T) {
	src := `accounts:
  - system_id: shop
    password: secret
    route: [a]
upstreams:
  - name: a
    address: "127.0.0.1:2776"
    system_id: proxy
    tls_ca: ca.pem
    tls_server_name: smsc.example.net
`
	_, err := Parse([]byte(src), "x.yaml")
	if err == nil {
		t.Fatal("Parse accepted tls_ca and tls_server_name without tls: true")
	}
	for _, want := range []string{"x.yaml:9: upstreams[0].tls_ca: needs tls: true", "x.yaml:10: upstreams[0].tls_server_name: needs tls: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse error = %q, want it to contain %q", err, want)
		}
	}
	ok := strings.Replace(src, "    tls_ca:", "    tls: true\n    tls_ca:", 1)
	c, err := Parse([]byte(ok), "x.yaml")
	if err != nil {
		t.Fatalf("Parse with tls: true = %v", err)
	}
	if u := c.Upstreams[0]; u.TLSCA != "ca.pem" || u.TLSServerName != "smsc.example.net" {
		t.Errorf("upstream TLS = %q %q, want ca.pem smsc.example.net", u.TLSCA, u.TLSServerName)
	}
}
