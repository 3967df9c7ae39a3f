package logx

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestMaskAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"447700900123", "447*******23"},
		{"+447700900123", "+44********23"},
		{"0770 090-0123", "077********23"},
		{"12345", "12345"}, // nothing between the kept ends
		{"1234", "1234"},   // too short to be a number
		{"SHOP", "SHOP"},   // alphanumeric sender id
		{"Shop123456", "Shop123456"},
		{"", ""},
	} {
		if got := MaskAddress(tc.in); got != tc.want {
			t.Errorf("MaskAddress(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestForbidden(t *testing.T) {
	for key, want := range map[string]bool{
		"text": true, "short_message": true, "message_payload": true, "Password": true,
		"upstream_password": true, "secret": true, "token": true,
		"key": false, "message_id": false, "account": false, "status": false, "dst": false,
	} {
		if got := Forbidden(key); got != want {
			t.Errorf("Forbidden(%q) = %v, want %v", key, got, want)
		}
	}
}

// Every way an attribute can reach a handler: on the record, through With,
// inside a group, through a LogValuer.
func TestHandlerDropsContentAndMasksAddresses(t *testing.T) {
	for _, redact := range []bool{true, false} {
		var buf bytes.Buffer
		log := slog.New(NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), Options{RedactAddresses: redact}))
		log = log.With("password", "hunter2", "account", "shop")
		log.WithGroup("submit").Info("decided",
			"key", "otp-1", "short_message", "Your code is 482915", "dst", "447700900123",
			slog.Group("pdu", "message_payload", "482915", "src", "+447700900999", "data_coding", 0),
			"text", valuer{"482915"},
		)
		line := buf.String()
		for _, secret := range []string{"hunter2", "482915", "short_message", "message_payload", `"text"`} {
			if strings.Contains(line, secret) {
				t.Errorf("redact=%v: log line contains %q: %s", redact, secret, line)
			}
		}
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, line)
		}
		sub := m["submit"].(map[string]any)
		wantDst, wantSrc := "447700900123", "+447700900999"
		if redact {
			wantDst, wantSrc = "447*******23", "+44********99"
		}
		if sub["dst"] != wantDst || sub["pdu"].(map[string]any)["src"] != wantSrc {
			t.Errorf("redact=%v: dst=%v src=%v, want %q %q", redact, sub["dst"], sub["pdu"].(map[string]any)["src"], wantDst, wantSrc)
		}
		if sub["key"] != "otp-1" || m["account"] != "shop" {
			t.Errorf("redact=%v: lost innocent attributes: %s", redact, line)
		}
	}
}

type valuer struct{ s string }

func (v valuer) LogValue() slog.Value { return slog.StringValue(v.s) }
