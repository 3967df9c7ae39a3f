package config

import (
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// Tests of single options, each on a configuration of one account, shop,
// routed to one upstream, a.

// shopOnA is that configuration with account and upstream appended to the
// account's and the upstream's keys (lines indented by four spaces). The
// account's extra keys start at line 5; with none, the upstream's at line
// 9.
func shopOnA(account, upstream string) string {
	return "accounts:\n  - system_id: shop\n    password: secret\n    route: [a]\n" + account +
		"upstreams:\n  - name: a\n    address: \"127.0.0.1:2776\"\n    system_id: proxy\n" + upstream
}

// Each YAML bind mode opens the sessions it names.
func TestBindModeSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m         BindMode
		bind      smpp.BindType
		receivers bool
	}{
		{"transceiver", smpp.BindTransceiver, false},
		{"transmitter", smpp.BindTransmitter, false},
		{"transmitter+receiver", smpp.BindTransmitter, true},
		{"receiver", smpp.BindNone, false},
	}
	for _, tt := range tests {
		if b, rx := tt.m.Sessions(); b != tt.bind || rx != tt.receivers {
			t.Errorf("BindMode(%q).Sessions() = %v, %v, want %v, %v", tt.m, b, rx, tt.bind, tt.receivers)
		}
	}
}

// proxy_id takes a format and a length of 8 to 64 octets.
func TestProxyIDStyle(t *testing.T) {
	base := shopOnA("    message_id: proxy\n    proxy_id: {format: FORMAT, length: LENGTH}\n", "")
	tests := map[string]struct {
		format, length string
		wantErr        string
	}{
		"dec 12":     {"dec", "12", ""},
		"hex 64":     {"hex", "64", ""},
		"too short":  {"hex", "7", "x.yaml:6: accounts[0].proxy_id.length: must be 8..64 octets (got 7)"},
		"too long":   {"dec", "65", "accounts[0].proxy_id.length: must be 8..64 octets (got 65)"},
		"bad format": {"as-is", "20", "accounts[0].proxy_id.format"},
	}
	for name, tc := range tests {
		src := strings.NewReplacer("FORMAT", tc.format, "LENGTH", tc.length).Replace(base)
		c, err := Parse([]byte(src), "x.yaml")
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: Parse = %v, want ok", name, err)
		case tc.wantErr == "" && (string(c.Accounts[0].ProxyID.Format) != tc.format):
			t.Errorf("%s: proxy_id.format = %q, want %q", name, c.Accounts[0].ProxyID.Format, tc.format)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: Parse error = %v, want it to contain %q", name, err, tc.wantErr)
		}
	}
}

// An upstream's tls_ca and tls_server_name are refused without tls: true.
func TestUpstreamTLSKeysNeedTLS(t *testing.T) {
	src := shopOnA("", "    tls_ca: ca.pem\n    tls_server_name: smsc.example.net\n")
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
