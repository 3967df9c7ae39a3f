package config

import (
	"strings"
	"testing"
)

func TestProxyIDStyle(t *testing.T) {
	base := `accounts:
  - system_id: shop
    password: secret
    route: [a]
    message_id: proxy
    proxy_id: {format: FORMAT, length: LENGTH}
upstreams:
  - name: a
    address: "127.0.0.1:2776"
    system_id: proxy
`
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
