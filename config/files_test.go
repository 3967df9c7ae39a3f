package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Load reads the TLS files the configuration names, and reports one that
// is missing or holds no PEM data with its line: `config check`, a start
// and a reload refuse it before anything changes.
func TestLoadReportsUnreadableTLSFilesWithTheirLine(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct{ yaml, want string }{
		"tls_ca missing": {
			shopOnA("", "    tls: true\n    tls_ca: "+filepath.Join(dir, "missing.pem")+"\n"),
			"x.yaml:10: upstreams[0].tls_ca: open ",
		},
		"tls_ca without PEM": {
			shopOnA("", "    tls: true\n    tls_ca: "+notPEM+"\n"),
			"x.yaml:10: upstreams[0].tls_ca: " + notPEM + ": no PEM certificate in it",
		},
		"listener certificate missing": {
			"listen:\n  tls:\n    cert: " + filepath.Join(dir, "server.crt") + "\n    key: " + filepath.Join(dir, "server.key") + "\n" + shopOnA("", ""),
			"x.yaml:3: listen.tls.cert: cannot load the certificate and key: open ",
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "x.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Parse([]byte(tt.yaml), path); err != nil {
				t.Fatalf("Parse (which reads no file) = %v, want the configuration accepted", err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), strings.Replace(tt.want, "x.yaml", path, 1)) {
				t.Errorf("Load = %v, want an error containing %q", err, strings.Replace(tt.want, "x.yaml", path, 1))
			}
		})
	}
}
