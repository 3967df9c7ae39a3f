package dlr

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/internal/testkit"

	"github.com/smppproxy/smppproxy/smpp"
)

// A fingerprint-derived key embeds the message's fingerprint; receipt log
// lines show the key the way Config.LogKey says (the proxy: its tag),
// never the fingerprint.
func TestReceiptLogLinesShowKeysThroughLogKey(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	out := &testkit.Buffer{}
	e := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.LogKey = func(k string) string { return strings.Replace(k, fp, "TAG", 1) }
	})
	e.accepted(t, "shop", "fp:"+fp, "3e8")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v, want 0", st)
	}
	waitFor(t, "the receipt's log line", func() bool { return strings.Contains(out.String(), "key=fp:TAG") })
	if strings.Contains(out.String(), fp) {
		t.Errorf("a log line carries the fingerprint of a fingerprint key:\n%s", out.String())
	}
}
