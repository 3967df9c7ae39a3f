package main

import (
	"os"
	"path/filepath"
	"testing"
)

// `config check` fails for a file serve would refuse at start: a missing
// admin.token_file, a missing or empty store.dsn_file (it said ok).
func TestConfigCheckRefusesTheFilesServeWouldRefuse(t *testing.T) {
	dir := t.TempDir()
	base := `upstreams:
  - name: primary
    address: "127.0.0.1:2776"
    system_id: proxy
accounts:
  - system_id: shop
    password_hash: "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"
    route: [primary]
`
	empty := filepath.Join(dir, "empty.dsn")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, extra := range map[string]string{
		"token_file missing": "admin: {address: \"127.0.0.1:9775\", token_file: " + filepath.Join(dir, "nope.token") + "}\nstore: {path: " + dir + "/data}\n",
		"dsn_file missing":   "store: {backend: postgres, dsn_file: " + filepath.Join(dir, "nope.dsn") + "}\n",
		"dsn_file empty":     "store: {backend: postgres, dsn_file: " + empty + "}\n",
	} {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runCLI(t, "config", "check", "--config", p)
		if err == nil {
			t.Errorf("%s: config check exit 0: %q (serve refuses this file)", name, out)
		}
	}
}
