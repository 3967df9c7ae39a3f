package smppserver

import (
	"encoding/json"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"log/slog"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// Every close reason is written by name and read back from that name.
func TestCloseReasonNamesRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for r := ReasonNone; r < reasonCount; r++ {
		text, err := r.MarshalText()
		if err != nil || string(text) != r.String() {
			t.Fatalf("CloseReason(%d).MarshalText() = %q, %v, want %q", int(r), text, err, r.String())
		}
		if r.String() == "" || r.String() == "unknown" || seen[r.String()] {
			t.Errorf("CloseReason(%d) has name %q: empty, unknown or used twice", int(r), r.String())
		}
		seen[r.String()] = true
		var back CloseReason
		if err := back.UnmarshalText(text); err != nil || back != r {
			t.Errorf("UnmarshalText(%q) = %v, %v, want %v", text, back, err, r)
		}
	}
	var r CloseReason
	if err := r.UnmarshalText([]byte("1")); err == nil {
		t.Errorf("UnmarshalText(%q) = %v, want an error", "1", r)
	}
}

// The refusal reasons are written by name, the metric label value.
func TestRefuseReasonNames(t *testing.T) {
	t.Parallel()
	for r := refusedMaxConnections; int(r) < len(refuseNames); r++ {
		text, err := r.MarshalText()
		if err != nil || string(text) != refuseNames[r] || r.String() != refuseNames[r] {
			t.Errorf("refuseReason(%d): MarshalText() = %q, %v; String() = %q; want %q", int(r), text, err, r.String(), refuseNames[r])
		}
	}
}

// A JSON log line of a session close carries the reason's name, never its
// number.
func TestSessionCloseLogsReasonByName(t *testing.T) {
	t.Parallel()
	var buf testkit.Buffer
	srv, addr := startServer(t, nil, func(s *Server) { s.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	s := sessionOf(t, srv, c)
	_ = c.conn.Close()
	if got := waitClosed(t, s); got != ReasonClientClosed {
		t.Fatalf("CloseReason() = %v, want %v", got, ReasonClientClosed)
	}
	var line map[string]any
	waitFor(t, "the session close log line", func() bool {
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `"esme session closed"`) {
				return json.Unmarshal([]byte(l), &line) == nil
			}
		}
		return false
	})
	if got := line["reason"]; got != "client_closed" {
		t.Errorf(`close log line "reason" = %#v, want "client_closed": %v`, got, line)
	}
}
