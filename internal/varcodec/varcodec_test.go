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

// A decoder made by Sharing reads the same strings as one that copies
// each, and they do not change when the input is written over after.
func TestSharingReadsTheSameStringsAndKeepsThemWhenTheInputChanges(t *testing.T) {
	b := AppendString(nil, "account")
	b = AppendString(b, "")
	b = append(b, 7)
	b = AppendString(b, "key-1")
	d := Sharing(b, errBad)
	a, empty, c, k := d.Str(), d.Str(), d.Byte(), d.Str()
	if a != "account" || empty != "" || c != 7 || k != "key-1" || d.Err != nil || len(d.B) != 0 {
		t.Fatalf("read %q %q %d %q, err %v, %d left; want what was written", a, empty, c, k, d.Err, len(d.B))
	}
	for i := range b {
		b[i] = 'x'
	}
	if a != "account" || k != "key-1" {
		t.Fatalf("strings read became %q %q when the input was written over", a, k)
	}
	two := AppendString(AppendString(nil, "account"), "key-1")
	if n := testing.AllocsPerRun(100, func() {
		d := Sharing(two, errBad)
		_, _ = d.Str(), d.Str()
	}); n != 1 {
		t.Errorf("two strings read with Sharing took %v allocations; want 1, the input's copy", n)
	}
}

func FuzzDecoderNeverPanics(f *testing.F) {
	f.Add(AppendTime(AppendString(nil, "x"), time.Unix(1, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, d := range []Decoder{{B: b, Corrupt: errBad}, Sharing(b, errBad)} {
			var dst [4]byte
			s := d.Str()
			d.Time()
			d.U32()
			d.Int()
			d.Byte()
			d.Bytes(dst[:])
			if d.Err != nil && !errors.Is(d.Err, errBad) {
				t.Fatalf("error %v does not wrap Corrupt", d.Err)
			}
			want := Decoder{B: b, Corrupt: errBad}
			if s != want.Str() {
				t.Fatalf("first string %q, want %q", s, want.Str())
			}
		}
	})
}
