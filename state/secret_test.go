package state

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fingerprint secret is created once per store directory, readable by
// the owner only, and read back unchanged on every later start.
func TestFileSecretIsCreatedOnceWithOwnerOnlyAccess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, created, err := FileSecret{Dir: dir}.LoadOrCreate(context.Background())
	if err != nil || !created {
		t.Fatalf("first LoadOrCreate = %v, created %v; want a new secret", err, created)
	}
	fi, err := os.Stat(filepath.Join(dir, SecretFileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Errorf("secret file mode %v size %d, want 0600 and 32 bytes", fi.Mode().Perm(), fi.Size())
	}
	again, created, err := FileSecret{Dir: dir}.LoadOrCreate(context.Background())
	if err != nil || created || again.key != first.key {
		t.Errorf("second LoadOrCreate = created %v, %v, same key %v; want the stored secret", created, err, again.key == first.key)
	}
	if first.key == ([32]byte{}) {
		t.Errorf("secret is all zero")
	}
	if err := os.WriteFile(filepath.Join(dir, SecretFileName), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (FileSecret{Dir: dir}).LoadOrCreate(context.Background()); err == nil || !strings.Contains(err.Error(), "restore") {
		t.Errorf("LoadOrCreate of a damaged secret file = %v, want an error saying to restore it", err)
	}
}

// Whatever prints or logs a Secret shows a placeholder, never its bytes.
func TestSecretNeverPrints(t *testing.T) {
	s, err := RandomSecret()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", s)
	j, _ := json.Marshal(struct{ S *Secret }{s})
	out := fmt.Sprintf("%v %+v %#v %s %x", s, s, s, s, s) + logs.String() + string(j)
	for _, leak := range []string{hex.EncodeToString(s.key[:]), string(s.key[:8]), fmt.Sprint(s.key[:4])} {
		if strings.Contains(out, leak) {
			t.Errorf("secret leaked in %q", out)
		}
	}
}
