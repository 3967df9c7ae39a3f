// Package varcodec is the compact binary encoding the stores write their
// records in: integers as Go varints, a string as a uvarint length and its
// bytes, a time as a uvarint n (0: the zero time, else n-1 nanoseconds)
// and a varint of Unix seconds. The embedded store (state) and the
// PostgreSQL store (pgstore) share it.
package varcodec

import (
	"encoding/binary"
	"fmt"
	"time"
)

// AppendString appends s: its length and its bytes.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendTime appends t (the zero time in one byte).
func AppendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(t.Nanosecond())+1)
	return binary.AppendVarint(dst, t.Unix())
}

// Decoder reads fields from B. The first error sticks (wrapping Corrupt)
// and every later read returns a zero value; B is never read past its end.
type Decoder struct {
	B       []byte
	Err     error
	Corrupt error // wrapped by every error of the decoder
	// S, when set, is a string copy of B as it was when reading began
	// (Sharing sets both): Str then returns substrings of S instead of
	// copying each string, one allocation for the whole input instead of
	// one per string read. The strings keep S's memory alive.
	S string
}

// Sharing returns a Decoder of b whose strings share one copy of b.
func Sharing(b []byte, corrupt error) Decoder {
	return Decoder{B: b, S: string(b), Corrupt: corrupt}
}

// Fail records a decoding error (the first one sticks).
func (d *Decoder) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: "+format, append([]any{d.Corrupt}, args...)...)
	}
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail("bad uvarint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// U32 reads an unsigned varint that must fit 32 bits.
func (d *Decoder) U32() uint32 {
	v := d.Uvarint()
	if v > 1<<32-1 {
		d.Fail("%d overflows uint32", v)
		return 0
	}
	return uint32(v)
}

// Int reads a signed varint that must fit an int.
func (d *Decoder) Int() int {
	v := d.Varint()
	if int64(int(v)) != v {
		d.Fail("%d overflows int", v)
		return 0
	}
	return int(v)
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.Err != nil {
		return 0
	}
	if len(d.B) < 1 {
		d.Fail("truncated")
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

// Str reads a string.
func (d *Decoder) Str() string {
	b := d.StrBytes()
	end := len(d.S) - len(d.B) // where b ends in S
	if len(b) == 0 || end < len(b) {
		return string(b) // no S (or not B's): a copy
	}
	return d.S[end-len(b) : end]
}

// StrBytes reads a string's bytes without copying them: the slice aliases
// the input.
func (d *Decoder) StrBytes() []byte {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B)) {
		d.Fail("string length %d beyond end", n)
		return nil
	}
	b := d.B[:n:n]
	d.B = d.B[n:]
	return b
}

// SkipStr passes over a string without reading it.
func (d *Decoder) SkipStr() { d.StrBytes() }

// Bytes fills dst.
func (d *Decoder) Bytes(dst []byte) {
	if d.Err != nil {
		return
	}
	if len(d.B) < len(dst) {
		d.Fail("truncated")
		return
	}
	copy(dst, d.B)
	d.B = d.B[len(dst):]
}

// Time reads a time (UTC).
func (d *Decoder) Time() time.Time {
	ns := d.Uvarint()
	if ns == 0 || d.Err != nil {
		return time.Time{}
	}
	sec := d.Varint()
	if ns-1 >= uint64(time.Second) {
		d.Fail("nanoseconds %d out of range", ns-1)
		return time.Time{}
	}
	return time.Unix(sec, int64(ns-1)).UTC()
}
