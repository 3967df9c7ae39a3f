package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckFiles reads the TLS files the configuration names, and reports one that
// is missing or holds no PEM data with its line: `config check`, a start
// and a reload refuse it before anything changes.
func TestCheckFilesReportsUnreadableTLSFilesWithTheirLine(t *testing.T) {
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
			c, err := Load(path)
			if err == nil {
				err = c.CheckFiles()
			}
			if err == nil || !strings.Contains(err.Error(), strings.Replace(tt.want, "x.yaml", path, 1)) {
				t.Errorf("Load = %v, want an error containing %q", err, strings.Replace(tt.want, "x.yaml", path, 1))
			}
		})
	}
}

// CheckFiles reports a token file or DSN file that is missing or empty, which
// serve would refuse at start, naming the file and never its contents.
func TestCheckFilesReportsMissingOrEmptySecretFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct{ yaml, want string }{
		"token_file missing": {"admin:\n  token_file: " + filepath.Join(dir, "nope.token") + "\n" + shopOnA("", ""), "admin.token_file: open "},
		"dsn_file missing":   {"store:\n  backend: postgres\n  dsn_file: " + filepath.Join(dir, "nope.dsn") + "\n" + shopOnA("", ""), "store.dsn_file: open "},
		"dsn_file empty":     {"store:\n  backend: postgres\n  dsn_file: " + empty + "\n" + shopOnA("", ""), "store.dsn_file: " + empty + " is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "x.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(path)
			if err == nil {
				err = c.CheckFiles()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A reload reads the TLS files only: the token and DSN files are read at
// start, and a reload, which leaves them, is not refused for one removed
// since.
func TestCheckReloadFilesLeavesTheSecretFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.yaml")
	yaml := "admin:\n  token_file: " + filepath.Join(dir, "gone.token") + "\n" + shopOnA("", "")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckReloadFiles(); err != nil {
		t.Errorf("CheckReloadFiles with the token file gone = %v, want nil", err)
	}
	if err := c.CheckFiles(); err == nil {
		t.Error("CheckFiles with the token file gone = nil, want an error (a start reads it)")
	}
}
