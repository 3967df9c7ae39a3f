package smpp

import "testing"

// Every bind type is written by its short name and read back from either
// spelling, in any case; its bind command maps back to it.
func TestBindTypeNamesRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		b           BindType
		short, long string
		cmd         uint32
	}{
		{BindNone, "unbound", "unbound", 0},
		{BindTransmitter, "TX", "transmitter", CmdBindTransmitter},
		{BindReceiver, "RX", "receiver", CmdBindReceiver},
		{BindTransceiver, "TRX", "transceiver", CmdBindTransceiver},
	}
	if len(tests) != int(bindTypeCount) {
		t.Fatalf("%d bind types tested, %d declared", len(tests), bindTypeCount)
	}
	for _, tt := range tests {
		text, err := tt.b.MarshalText()
		if err != nil || string(text) != tt.short || tt.b.String() != tt.short || tt.b.Name() != tt.long {
			t.Errorf("%d: MarshalText() = %q, %v; String() = %q; Name() = %q; want %q, %q", uint8(tt.b), text, err, tt.b.String(), tt.b.Name(), tt.short, tt.long)
		}
		for _, s := range []string{tt.short, tt.long, string(text)} {
			var back BindType
			if err := back.UnmarshalText([]byte(s)); err != nil || back != tt.b {
				t.Errorf("UnmarshalText(%q) = %v, %v, want %v", s, back, err, tt.b)
			}
		}
		if got := tt.b.Command(); got != tt.cmd {
			t.Errorf("%v.Command() = %#x, want %#x", tt.b, got, tt.cmd)
		}
		if tt.cmd != 0 {
			if got := BindTypeOf(tt.cmd); got != tt.b {
				t.Errorf("BindTypeOf(%#x) = %v, want %v", tt.cmd, got, tt.b)
			}
			if got := BindTypeOf(tt.cmd | RespBit); got != tt.b {
				t.Errorf("BindTypeOf(%#x) = %v, want %v", tt.cmd|RespBit, got, tt.b)
			}
		}
	}
	for _, s := range []string{"trx", "Transmitter", "rx"} {
		if _, err := ParseBindType(s); err != nil {
			t.Errorf("ParseBindType(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "xx", "transmitter+receiver"} {
		if b, err := ParseBindType(s); err == nil {
			t.Errorf("ParseBindType(%q) = %v, want an error", s, b)
		}
	}
	if _, err := BindType(9).MarshalText(); err == nil {
		t.Errorf("BindType(9).MarshalText() succeeded, want an error")
	}
}

// Only transmitters and transceivers submit; only receivers and
// transceivers receive.
func TestBindTypeDirections(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		b      BindType
		tx, rx bool
	}{
		{BindNone, false, false},
		{BindTransmitter, true, false},
		{BindReceiver, false, true},
		{BindTransceiver, true, true},
	} {
		if tt.b.CanTransmit() != tt.tx || tt.b.CanReceive() != tt.rx {
			t.Errorf("%v: CanTransmit() = %v, CanReceive() = %v, want %v, %v", tt.b, tt.b.CanTransmit(), tt.b.CanReceive(), tt.tx, tt.rx)
		}
	}
}
