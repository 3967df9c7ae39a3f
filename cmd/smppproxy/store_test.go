package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/pgstore"
)

func TestStoreMigrateThenStatusOnTheSharedStore(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "cli_test_")
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsnFile, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	yaml := fmt.Sprintf(`store:
  backend: postgres
  dsn_file: %q
  schema: %s
upstreams:
  - {name: smsc, address: "127.0.0.1:2776", system_id: proxy}
accounts:
  - {system_id: shop, password: pw, route: [smsc]}
`, dsnFile, schema)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "store", "status", "--config", cfg)
	if !strings.Contains(out, "version 0") || !strings.Contains(out, "smppproxy store migrate") {
		t.Errorf("status before migrate:\n%s\nwant version 0 and the command to run", out)
	}
	for range 2 { // idempotent
		out = mustCLI(t, "store", "migrate", "--config", cfg)
		if want := fmt.Sprintf("version %d", pgstore.SchemaVersion()); !strings.Contains(out, want) {
			t.Errorf("migrate printed %q, want %q", out, want)
		}
	}
	out = mustCLI(t, "store", "status", "--config", cfg)
	if want := fmt.Sprintf("at version %d (this build: %d)", pgstore.SchemaVersion(), pgstore.SchemaVersion()); !strings.Contains(out, want) || strings.Contains(out, "run `smppproxy store migrate`") {
		t.Errorf("status after migrate:\n%s\nwant %q and no migrate hint", out, want)
	}
	if strings.Contains(out, dsn) {
		t.Error("store status printed the DSN (it holds the password)")
	}
}

func TestStoreCommandsRefuseTheEmbeddedStore(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:\n  - {name: smsc, address: \"127.0.0.1:2776\", system_id: proxy}\naccounts:\n  - {system_id: shop, password: pw, route: [smsc]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "store", "migrate", "--config", cfg); err == nil || !strings.Contains(err.Error(), "backend: postgres") {
		t.Errorf("store migrate on a badger configuration = %v, want an error naming backend: postgres", err)
	}
}
