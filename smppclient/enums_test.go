package smppclient

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every close reason is written by name and read back from that name.
func TestCloseReasonNamesRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for r := ReasonNone; r < reasonCount; r++ {
		text, err := r.MarshalText()
		if err != nil || string(text) != r.String() || seen[r.String()] {
			t.Fatalf("CloseReason(%d).MarshalText() = %q, %v; want %q, used once", int(r), text, err, r.String())
		}
		seen[r.String()] = true
		var back CloseReason
		if err := back.UnmarshalText(text); err != nil || back != r {
			t.Errorf("UnmarshalText(%q) = %v, %v, want %v", text, back, err, r)
		}
	}
	var r CloseReason
	if err := r.UnmarshalText([]byte("2")); err == nil {
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
		text, err := st.MarshalText()
		if err != nil || string(text) != name || st.String() != name {
			t.Errorf("State(%d): MarshalText() = %q, %v; String() = %q; want %q", uint8(st), text, err, st.String(), name)
		}
		var back State
		if err := back.UnmarshalText(text); err != nil || back != st {
			t.Errorf("UnmarshalText(%q) = %v, %v, want %v", text, back, err, st)
		}
	}
	var st State
	if err := st.UnmarshalText([]byte("1")); err == nil {
		t.Errorf("UnmarshalText(%q) = %v, want an error", "1", st)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A JSON log line of a session close carries the reason's name, never its
// number.
func TestSessionCloseLogsReasonByName(t *testing.T) {
	f := startFake(t)
	var buf lockedBuffer
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
