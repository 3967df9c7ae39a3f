package dedup

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/state"
)

// Every decision line names the account, the ESME session and the key, and
// never the message text.
func TestDecisionLogsNameTheSessionNotTheText(t *testing.T) {
	var buf bytes.Buffer
	f := &fakeForwarder{}
	c := newClock()
	e := newTestEngine(t, Config{Store: state.NewMem(c.Now), Forwarder: f, Now: c.Now, InstanceID: "t",
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := WithSession(ctx, "esme-42")
	e.Submit(ctx, "shop", Policy{}, submit(t, "otp-9", "Your code is 918273"))
	e.Submit(ctx, "shop", Policy{}, submit(t, "otp-9", "Your code is 918273"))
	e.Submit(ctx, "shop", Policy{}, submit(t, "otp-9", "Your code is 000000"))
	out := buf.String()
	for _, want := range []string{"session=esme-42", "account=shop", "key=k:otp-9", "outcome=forwarded", "duplicate replayed", "conflict"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"918273", "000000", "Your code"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain message text %q:\n%s", secret, out)
		}
	}
}
