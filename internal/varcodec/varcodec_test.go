package varcodec

import (
	"errors"
	"testing"
	"time"
)

var errBad = errors.New("bad")

func TestFieldsRoundTripAndTheFirstErrorSticks(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	b := AppendString(nil, "héllo")
	b = AppendTime(b, at)
	b = AppendTime(b, time.Time{})
	d := Decoder{B: b, Corrupt: errBad}
	if s, got, zero := d.Str(), d.Time(), d.Time(); s != "héllo" || !got.Equal(at) || !zero.IsZero() || d.Err != nil || len(d.B) != 0 {
		t.Fatalf("read %q %v %v, err %v, %d left; want what was written", s, got, zero, d.Err, len(d.B))
	}
	d = Decoder{B: []byte{5, 'a'}, Corrupt: errBad} // a string of 5 bytes with 1 left
	if s := d.Str(); s != "" || !errors.Is(d.Err, errBad) {
		t.Fatalf("short string = %q, %v; want \"\" and an error wrapping Corrupt", s, d.Err)
	}
	first := d.Err
	if d.Uvarint() != 0 || d.Err != first {
		t.Error("a read after an error returned a value or replaced the first error")
	}
}

func FuzzDecoderNeverPanics(f *testing.F) {
	f.Add(AppendTime(AppendString(nil, "x"), time.Unix(1, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := Decoder{B: b, Corrupt: errBad}
		var dst [4]byte
		d.Str()
		d.Time()
		d.U32()
		d.Int()
		d.Byte()
		d.Bytes(dst[:])
		if d.Err != nil && !errors.Is(d.Err, errBad) {
			t.Fatalf("error %v does not wrap Corrupt", d.Err)
		}
	})
}
