package config

import (
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// Each YAML bind mode opens the sessions it names.
func TestBindModeSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m         BindMode
		bind      smpp.BindType
		receivers bool
	}{
		{"transceiver", smpp.BindTransceiver, false},
		{"transmitter", smpp.BindTransmitter, false},
		{"transmitter+receiver", smpp.BindTransmitter, true},
		{"receiver", smpp.BindNone, false},
	}
	for _, tt := range tests {
		if b, rx := tt.m.Sessions(); b != tt.bind || rx != tt.receivers {
			t.Errorf("BindMode(%q).Sessions() = %v, %v, want %v, %v", tt.m, b, rx, tt.bind, tt.receivers)
		}
	}
}
