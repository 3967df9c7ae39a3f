package msgid

import (
	"strings"
	"testing"
)

// Normalize(id, side, other) puts an id in the form both sides compare
// in; Convert(id, from, to) rewrites it from one format to another.
func TestNormalizeAndConvert(t *testing.T) {
	fns := map[string]func(id string, a, b Format) string{"Normalize": Normalize, "Convert": Convert}
	tests := []struct {
		fn, id string
		a, b   Format
		want   string
	}{
		{"Normalize", "0A1B", Hex, Dec, "2587"},
		{"Normalize", "0a1b", Hex, Dec, "2587"},
		{"Normalize", "0x0a1b", Hex, AsIs, "2587"},
		{"Normalize", "2587", Dec, Hex, "2587"},
		{"Normalize", "0002587", Dec, Hex, "2587"},
		{"Normalize", "2587", AsIs, Dec, "2587"},
		{"Normalize", "0002587", AsIs, Dec, "2587"}, // as-is takes the other side's format
		{"Normalize", "0A1B", AsIs, AsIs, "0A1B"},
		{"Normalize", "0A1B", "", "", "0A1B"},
		{"Normalize", "not-hex", Hex, Dec, "not-hex"},
		{"Normalize", "", Hex, Dec, ""},
		{"Normalize", "-5", Dec, Dec, "-5"},
		{"Normalize", "ffffffffffffffffffffffff", Hex, Dec, "79228162514264337593543950335"}, // beyond 64 bits
		{"Convert", "1000", Dec, Hex, "3e8"},
		{"Convert", "3E8", Hex, Dec, "1000"},
		{"Convert", "3E8", Hex, Hex, "3E8"},
		{"Convert", "3E8", Hex, AsIs, "3E8"},
		{"Convert", "xyz", Dec, Hex, "xyz"},
	}
	for _, tc := range tests {
		if got := fns[tc.fn](tc.id, tc.a, tc.b); got != tc.want {
			t.Errorf("%s(%q, %s, %s) = %q, want %q", tc.fn, tc.id, tc.a, tc.b, got, tc.want)
		}
	}
}

// An id from the response and the same id from a receipt meet in the
// middle, whichever side writes hex.
func TestNormalizeBothSidesMeet(t *testing.T) {
	tests := []struct {
		resp, receipt       string
		respFmt, receiptFmt Format
	}{
		{"3e8", "1000", Hex, Dec},
		{"1000", "3E8", Dec, Hex},
		{"abc-1", "abc-1", AsIs, AsIs},
		{"03e8", "3e8", Hex, AsIs},
	}
	for _, tc := range tests {
		a, b := Normalize(tc.resp, tc.respFmt, tc.receiptFmt), Normalize(tc.receipt, tc.receiptFmt, tc.respFmt)
		if a != b {
			t.Errorf("resp %q (%s) → %q, receipt %q (%s) → %q; want the same", tc.resp, tc.respFmt, a, tc.receipt, tc.receiptFmt, b)
		}
	}
}

func TestNewProxyID(t *testing.T) {
	tests := []struct {
		style  ProxyIDStyle
		length int
		digits string
	}{
		{ProxyIDStyle{}, 20, "0123456789abcdef"},
		{ProxyIDStyle{Format: Hex, Length: 64}, 64, "0123456789abcdef"},
		{ProxyIDStyle{Format: Dec, Length: 8}, 8, "0123456789"},
	}
	for _, tc := range tests {
		seen := map[string]bool{}
		for range 200 {
			id := NewProxyID(tc.style)
			if len(id) != tc.length || strings.Trim(id, tc.digits) != "" || tc.style.Format == Dec && id[0] == '0' {
				t.Fatalf("NewProxyID(%+v) = %q; want %d of %q (no leading 0 for dec)", tc.style, id, tc.length, tc.digits)
			}
			if seen[id] {
				t.Fatalf("NewProxyID(%+v) repeated %q", tc.style, id)
			}
			seen[id] = true
		}
	}
	for _, bad := range []ProxyIDStyle{{Length: 7}, {Length: 65}, {Format: "b64"}} {
		if bad.Validate() == nil {
			t.Errorf("ProxyIDStyle%+v.Validate() = nil, want an error", bad)
		}
		if _, err := New(nil, map[string]ProxyIDStyle{"p": bad}); err == nil {
			t.Errorf("New with proxy id style %+v = nil error, want one", bad)
		}
	}
}

func TestProxyIDsAreMadeOnlyForProxyAccountsAndIDsNormalizeByFormat(t *testing.T) {
	x, err := New(map[string]Upstream{"h2d": {RespIDFormat: Hex, ReceiptIDFormat: Dec}}, map[string]ProxyIDStyle{"p": {}})
	if err != nil {
		t.Fatal(err)
	}
	if id := x.IssueID("p"); len(id) != 20 {
		t.Errorf("IssueID(proxy account) = %q, want a 20-octet id", id)
	}
	if id := x.IssueID("q"); id != "" {
		t.Errorf("IssueID(passthrough account) = %q, want \"\"", id)
	}
	if a, b := x.NormalizeID("h2d", "ff"), x.NormalizeReceiptID("h2d", "255"); a != "255" || b != "255" {
		t.Errorf("NormalizeID(ff), NormalizeReceiptID(255) = %q, %q; want 255, 255", a, b)
	}
	if got := x.RespIDFromReceipt("h2d", "255"); got != "ff" {
		t.Errorf("RespIDFromReceipt(255) = %q, want ff", got)
	}
	if got := x.NormalizeID("unknown", "ff"); got != "ff" {
		t.Errorf("NormalizeID(unknown upstream, ff) = %q, want ff", got)
	}
}

// An id far longer than SMPP allows (upstream PDUs may be 128 KiB) is not
// read as a number: it is compared as written. Converting it cost time
// growing with the square of its length (26 ms for one receipt of a
// 60,000-digit id, and again at each retry of its match: from review).
func TestAnOverlongIDIsNotReadAsANumber(t *testing.T) {
	long := strings.Repeat("f", MaxNumberLen+1)
	if got := Normalize(long, Hex, Dec); got != long {
		t.Errorf("Normalize(%d hex digits) changed the id (%d octets)", len(long), len(got))
	}
	if got := Convert(long, Hex, Dec); got != long {
		t.Errorf("Convert(%d hex digits) changed the id (%d octets)", len(long), len(got))
	}
	ok := strings.Repeat("f", MaxNumberLen)
	if got := Normalize(ok, Hex, Dec); got == ok {
		t.Errorf("Normalize(%d hex digits) left the id as written; want its decimal value", len(ok))
	}
}
