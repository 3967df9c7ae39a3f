package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// valueError is the message a leaf type's UnmarshalYAML reports; the decoder
// adds the file, line and path.
type valueError string

func (e valueError) Error() string { return string(e) }

// Duration is a time.Duration written in YAML as a Go duration string
// ("10s", "1m30s", "72h"). Configuration durations are never negative.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.String without trailing zero units:
// "72h" rather than "72h0m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return valueError(`must be a Go duration such as "10s" or "72h"`)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return valueError(fmt.Sprintf(`must be a Go duration such as "10s" or "72h" (got %q)`, n.Value))
	}
	if v < 0 {
		return valueError(fmt.Sprintf("must not be negative (got %q)", n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText implements encoding.TextMarshaler (JSON output of the admin API).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Bytes is a size in bytes, written in YAML as an integer (65536) or with
// a unit: KiB, MiB, GiB (powers of 1024) or KB, MB, GB (powers of 1000).
type Bytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	const want = `must be a size such as 65536, "512KiB" or "16MiB"`
	if n.Kind != yaml.ScalarNode {
		return valueError(want)
	}
	s, mult := strings.TrimSpace(n.Value), int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<50)/mult {
		return valueError(fmt.Sprintf("%s (got %q)", want, n.Value))
	}
	*b = Bytes(v * mult)
	return nil
}

// String formats b with the largest binary unit that divides it.
func (b Bytes) String() string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalYAML implements yaml.Marshaler.
func (b Bytes) MarshalYAML() (any, error) { return b.String(), nil }

// MarshalText implements encoding.TextMarshaler.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// Status is an SMPP command_status. YAML accepts a hex string ("0x58",
// "0x00000400") or a decimal integer (88).
type Status uint32

// String formats s as eight hex digits, "0x00000400".
func (s Status) String() string { return fmt.Sprintf("0x%08X", uint32(s)) }

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Status) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseUint(n, 32)
	if err != nil {
		return valueError(`must be an SMPP status in hex ("0x00000058") or decimal (88)` + got(n))
	}
	*s = Status(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler; the status is emitted as hex.
func (s Status) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: s.String()}, nil
}

// MarshalText implements encoding.TextMarshaler.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Tag is an SMPP optional parameter (TLV) tag. YAML accepts hex ("0x1400")
// or a decimal integer (5120).
type Tag uint16

// String formats t as four hex digits, "0x1400".
func (t Tag) String() string { return fmt.Sprintf("0x%04X", uint16(t)) }

// UnmarshalYAML implements yaml.Unmarshaler.
func (t *Tag) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseUint(n, 16)
	if err != nil {
		return valueError(`must be a TLV tag in hex ("0x1400") or decimal (5120), at most 0xFFFF` + got(n))
	}
	*t = Tag(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler; the tag is emitted as hex.
func (t Tag) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: t.String()}, nil
}

// MarshalText implements encoding.TextMarshaler.
func (t Tag) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// parseUint reads a scalar as "0x" hex or plain decimal. Leading zeros do not
// mean octal, and there are no other bases or underscores: a status or tag
// reads the way an operator copies it from an SMSC's documentation.
func parseUint(n *yaml.Node, bits int) (uint64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, strconv.ErrSyntax
	}
	v := strings.TrimSpace(n.Value)
	if h, ok := strings.CutPrefix(v, "0x"); ok {
		return strconv.ParseUint(h, 16, bits)
	}
	if h, ok := strings.CutPrefix(v, "0X"); ok {
		return strconv.ParseUint(h, 16, bits)
	}
	return strconv.ParseUint(v, 10, bits)
}

func got(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return ""
	}
	return fmt.Sprintf(" (got %q)", n.Value)
}
