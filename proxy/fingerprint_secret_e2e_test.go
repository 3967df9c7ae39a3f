package proxy

import (
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// The fingerprint secret is created in the store directory on first start
// (0600, never logged) and read back after a restart, so a fingerprint
// keyed retry is still replayed; a store whose secret was lost refuses to
// start instead of taking every retry for a conflict.
func TestFingerprintSecretLivesInTheStoreDirectory(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	dir := t.TempDir()
	cfg := testConfig(t, smsc.Addr(), dir)
	cfg.Accounts[0].Idempotency.Key = config.KeyFingerprint
	cfg.Accounts[0].Idempotency.FingerprintWindow = config.Duration(time.Hour)
	var logs testkit.Buffer
	cfg.Log.Level = "debug"
	start := func() *App {
		app, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatalf("proxy.New: %v", err)
		}
		if err := app.Start(); err != nil {
			t.Fatal(err)
		}
		if err := app.WaitUpstreams(t.Context()); err != nil {
			t.Fatal(err)
		}
		return app
	}
	submitOnce := func(app *App) resp {
		c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
		return c.submit(1, keyed("", "Your code is 482913"))
	}

	app := start()
	first := submitOnce(app)
	app.Close()
	file := filepath.Join(dir, "fingerprint.secret")
	b, err := os.ReadFile(file)
	fi, serr := os.Stat(file)
	if err != nil || serr != nil || len(b) != 32 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %d bytes, %v, %v; want 32 bytes, mode 0600", len(b), err, serr)
	}

	app = start()
	again := submitOnce(app)
	app.Close()
	if first.Status != 0 || again.Status != 0 || again.ID != first.ID || smsc.Total() != 1 {
		t.Errorf("retry after a restart = %v %q (first %v %q), %d forwards; want the same id, forwarded once", again.Status, again.ID, first.Status, first.ID, smsc.Total())
	}
	for _, leak := range []string{hex.EncodeToString(b), string(b)} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("the secret appears in the logs")
		}
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for range 2 { // refused, and refused again: the lost secret is not replaced silently
		_, err := New(Options{Config: cfg})
		if err == nil || !strings.Contains(err.Error(), "fingerprint.secret") || !strings.Contains(err.Error(), "restore") {
			t.Fatalf("proxy.New on a store whose secret was lost = %v, want a refusal naming %s and saying to restore it", err, "fingerprint.secret")
		}
	}
}
