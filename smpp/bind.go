package smpp

import (
	"fmt"
	"strings"
)

// BindType is the kind of bind a session holds: transmitter, receiver or
// transceiver (BindNone before a bind). It is the one declaration of the
// concept for both sides of the proxy.
//
// String is the short SMPP spelling ("TX", "RX", "TRX", "unbound"), used
// for ESME sessions in logs, metric labels and the admin API; Name is the
// long spelling ("transmitter", …) used for upstream binds and in the
// configuration. MarshalText writes String; UnmarshalText reads either
// spelling, in any case.
type BindType uint8

// Bind types.
const (
	BindNone BindType = iota
	BindTransmitter
	BindReceiver
	BindTransceiver
	bindTypeCount
)

var bindShort = [...]string{
	BindNone:        "unbound",
	BindTransmitter: "TX",
	BindReceiver:    "RX",
	BindTransceiver: "TRX",
}

var bindLong = [...]string{
	BindNone:        "unbound",
	BindTransmitter: "transmitter",
	BindReceiver:    "receiver",
	BindTransceiver: "transceiver",
}

// String is the short spelling: "TX", "RX", "TRX" or "unbound".
func (b BindType) String() string {
	if b < bindTypeCount {
		return bindShort[b]
	}
	return fmt.Sprintf("BindType(%d)", uint8(b))
}

// Name is the long spelling: "transmitter", "receiver", "transceiver" or
// "unbound".
func (b BindType) Name() string {
	if b < bindTypeCount {
		return bindLong[b]
	}
	return fmt.Sprintf("BindType(%d)", uint8(b))
}

// Valid reports whether b is one of the declared bind types.
func (b BindType) Valid() bool { return b < bindTypeCount }

// MarshalText writes the short spelling; an undeclared value is an error.
func (b BindType) MarshalText() ([]byte, error) {
	if !b.Valid() {
		return nil, fmt.Errorf("smpp: invalid bind type %d", uint8(b))
	}
	return []byte(b.String()), nil
}

// UnmarshalText reads either spelling, case-insensitively.
func (b *BindType) UnmarshalText(text []byte) error {
	v, err := ParseBindType(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseBindType reads a bind type in either spelling ("TX" or
// "transmitter", …), case-insensitively.
func ParseBindType(s string) (BindType, error) {
	for b := BindNone; b < bindTypeCount; b++ {
		if strings.EqualFold(s, bindShort[b]) || strings.EqualFold(s, bindLong[b]) {
			return b, nil
		}
	}
	return BindNone, fmt.Errorf("smpp: unknown bind type %q (want TX, RX, TRX, transmitter, receiver or transceiver)", s)
}

// CanTransmit reports whether the bind may submit.
func (b BindType) CanTransmit() bool { return b == BindTransmitter || b == BindTransceiver }

// CanReceive reports whether the bind may receive deliver_sm.
func (b BindType) CanReceive() bool { return b == BindReceiver || b == BindTransceiver }

// Command is the bind request's command id (CmdBindTransmitter, …); 0 for
// BindNone and undeclared values.
func (b BindType) Command() uint32 {
	switch b {
	case BindTransmitter:
		return CmdBindTransmitter
	case BindReceiver:
		return CmdBindReceiver
	case BindTransceiver:
		return CmdBindTransceiver
	}
	return 0
}

// BindTypeOf is the bind type a bind request or response command id asks
// for; BindNone for any other command.
func BindTypeOf(cmd uint32) BindType {
	switch cmd &^ RespBit {
	case CmdBindTransmitter:
		return BindTransmitter
	case CmdBindReceiver:
		return BindReceiver
	case CmdBindTransceiver:
		return BindTransceiver
	}
	return BindNone
}
