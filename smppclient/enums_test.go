package smppclient

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// named is an enumeration written by name.
type named interface {
	comparable
	MarshalText() ([]byte, error)
	String() string
}

// checkNamed checks that v is written as name (MarshalText and String) and
// that parse, its UnmarshalText, reads it back from that name.
func checkNamed[T named](t *testing.T, v T, name string, parse func([]byte) (T, error)) {
	t.Helper()
	text, err := v.MarshalText()
	if err != nil || string(text) != name || v.String() != name {
		t.Errorf("%T(%v): MarshalText() = %q, %v; String() = %q; want %q", v, v, text, err, v.String(), name)
	}
	if back, err := parse(text); err != nil || back != v {
		t.Errorf("UnmarshalText(%q) = %v, %v, want %v", text, back, err, v)
	}
}

func parseReason(b []byte) (r CloseReason, err error) { err = r.UnmarshalText(b); return r, err }

func parseState(b []byte) (st State, err error) { err = st.UnmarshalText(b); return st, err }

// Every close reason is written by name and read back from that name.
func TestCloseReasonNamesRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for r := ReasonNone; r < reasonCount; r++ {
		if seen[r.String()] {
			t.Fatalf("CloseReason(%d) has name %q, used twice", int(r), r.String())
		}
		seen[r.String()] = true
		checkNamed(t, r, r.String(), parseReason)
	}
	if r, err := parseReason([]byte("2")); err == nil {
		t.Errorf("UnmarshalText(%q) = %v, want an error", "2", r)
	}
}

// Every session state is written by the name the admin API and the
// sessions metric show, and read back from it.
func TestStateNamesRoundTrip(t *testing.T) {
	t.Parallel()
	want := map[State]string{StateConnecting: "connecting", StateBound: "bound", StateClosed: "closed"}
	if len(want) != int(stateCount) {
		t.Fatalf("%d states tested, %d declared", len(want), stateCount)
	}
	for st, name := range want {
		checkNamed(t, st, name, parseState)
	}
	if st, err := parseState([]byte("1")); err == nil {
		t.Errorf("UnmarshalText(%q) = %v, want an error", "1", st)
	}
}

// A JSON log line of a session close carries the reason's name, never its
// number.
func TestSessionCloseLogsReasonByName(t *testing.T) {
	f := startFake(t)
	var buf testkit.Buffer
	p := New(Config{
		Name: "up", Address: f.addr, SystemID: "sys", Password: "pw", InstanceID: "test",
		Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
	})
	p.Start()
	waitUp(t, p, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"session closed"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
		}
	}
	if got := line["reason"]; got != "pool_closed" {
		t.Errorf(`close log line "reason" = %#v, want "pool_closed"; log:
%s`, got, buf.String())
	}
	if got := line["level"]; got != "INFO" {
		t.Errorf("close log line level = %v, want INFO", got)
	}
}
