package state

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Badger's warnings, and its notes about data files it deletes or
// truncates (which Badger logs below warning level), reach the log at
// WARN; its other chatter stays at DEBUG.
func TestBadgerWarningsAreLoggedAtWarn(t *testing.T) {
	var buf bytes.Buffer
	l := badgerLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	l.Warningf("a warning %d", 1)
	l.Debugf("Table file %d not referenced in MANIFEST\n", 7)
	l.Infof("Replay took: %s", "1ms")
	out := buf.String()
	for _, want := range []string{`level=WARN msg="badger: a warning 1"`, `level=WARN msg="badger: Table file 7 not referenced in MANIFEST"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s; got:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Replay took") {
		t.Errorf("Badger's chatter logged at WARN:\n%s", out)
	}
}
