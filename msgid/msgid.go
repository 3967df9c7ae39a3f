// Package msgid issues and normalises SMPP message ids (SPEC §4): how an
// upstream writes ids in its submit_sm_resp and in its receipts
// (resp_id_format, receipt_id_format: Format, Normalize, Convert), and the
// ids the proxy issues itself under message_id: proxy (ProxyIDStyle,
// NewProxyID). IDs gathers both per upstream and per account; the dedup
// engine uses it on the submit path and dlr on the receipt path. It
// imports nothing of the project.
package msgid

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
)

// Format is how an upstream writes message ids on one side (its
// submit_sm_resp, or its receipts): config's resp_id_format and
// receipt_id_format.
type Format string

// Id formats.
const (
	// AsIs: written the same way as on the other side (no conversion). With
	// both sides as-is ids are compared byte for byte.
	AsIs Format = "as-is"
	// Hex: a hexadecimal number (any case, an optional 0x prefix).
	Hex Format = "hex"
	// Dec: a decimal number (leading zeros allowed).
	Dec Format = "dec"
)

// effective resolves as-is against the other side's format.
func effective(side, other Format) Format {
	if side == "" || side == AsIs {
		side = other
	}
	if side == "" {
		return AsIs
	}
	return side
}

// MaxNumberLen is the longest id read as a number: SMPP ids are at most
// 64 octets, and the proxy keeps ids of up to 255 (some SMSCs exceed
// SMPP's limit), which in decimal take up to 308 digits; a longer one (an
// upstream may send 128 KiB PDUs) is compared as written, since
// converting it costs time growing with the square of its length.
const MaxNumberLen = 320

// parseNumber reads id in format f; ok=false for as-is, a malformed id or
// one over MaxNumberLen.
func parseNumber(id string, f Format) (*big.Int, bool) {
	if len(id) > MaxNumberLen {
		return nil, false
	}
	switch f {
	case Hex:
		id = strings.TrimPrefix(strings.TrimPrefix(id, "0x"), "0X")
		if id == "" || strings.ContainsAny(id, "+-_") {
			return nil, false
		}
		return new(big.Int).SetString(id, 16)
	case Dec:
		if id == "" || strings.ContainsAny(id, "+-_") {
			return nil, false
		}
		return new(big.Int).SetString(id, 10)
	}
	return nil, false
}

// Normalize returns the canonical form of id written on one side in
// format side, the other side being written in format other: the decimal
// value of the number when the side's (effective) format is hex or dec,
// else id itself. An id that does not parse in its format is returned
// unchanged. Two ids of one message, one from a submit_sm_resp and one
// from a receipt, normalise to the same string:
//
//	Normalize(respID, resp, receipt) == Normalize(receiptID, receipt, resp)
func Normalize(id string, side, other Format) string {
	f := effective(side, other)
	if n, ok := parseNumber(id, f); ok {
		return n.Text(10)
	}
	return id
}

// Convert rewrites id from format from into format to (each resolved
// against the other). Same effective formats, as-is, or an id that does
// not parse: id unchanged. Hex is written in lower case.
func Convert(id string, from, to Format) string {
	ef, et := effective(from, to), effective(to, from)
	if ef == et {
		return id
	}
	n, ok := parseNumber(id, ef)
	if !ok {
		return id
	}
	switch et {
	case Hex:
		return n.Text(16)
	case Dec:
		return n.Text(10)
	}
	return id
}

// ProxyIDStyle says what proxy-issued message ids look like.
type ProxyIDStyle struct {
	// Format is Hex (lower-case hex digits, the default) or Dec (decimal
	// digits, never a leading zero).
	Format Format
	// Length in octets: 8..64; 0 means 20. A 20-digit hex id carries 80
	// random bits.
	Length int
}

func (p ProxyIDStyle) withDefaults() ProxyIDStyle {
	if p.Format == "" || p.Format == AsIs {
		p.Format = Hex
	}
	if p.Length == 0 {
		p.Length = 20
	}
	return p
}

// Validate reports a style that cannot be issued.
func (p ProxyIDStyle) Validate() error {
	p = p.withDefaults()
	if p.Format != Hex && p.Format != Dec {
		return fmt.Errorf("msgid: proxy id format must be hex or dec (got %q)", p.Format)
	}
	if p.Length < 8 || p.Length > 64 {
		return fmt.Errorf("msgid: proxy id length must be 8..64 octets (got %d)", p.Length)
	}
	return nil
}

// NewProxyID returns a random message id in style p (SMPP allows 64
// octets; it has no spaces or NULs, so it fits receipt texts). Digits are
// drawn from crypto/rand without bias.
func NewProxyID(p ProxyIDStyle) string {
	p = p.withDefaults()
	digits, limit := "0123456789abcdef", byte(0)
	if p.Format == Dec {
		digits, limit = "0123456789", 250 // 250 = 25 × 10: no modulo bias
	}
	out := make([]byte, 0, p.Length)
	var buf [32]byte
	for len(out) < p.Length {
		_, _ = rand.Read(buf[:])
		for _, v := range buf {
			if limit != 0 && v >= limit || len(out) == p.Length {
				continue
			}
			d := digits[int(v)%len(digits)]
			if len(out) == 0 && p.Format == Dec && d == '0' {
				continue // a numeric id never starts with 0
			}
			out = append(out, d)
		}
	}
	return string(out)
}

// Upstream is how one upstream writes message ids: in its submit_sm_resp
// (resp_id_format) and in its receipts (receipt_id_format).
type Upstream struct {
	RespIDFormat, ReceiptIDFormat Format
}

// IDs implements dedup.IDs from the configuration: per upstream id
// formats and per account proxy ids. The zero value reads every id as-is
// and issues no proxy ids. Set replaces the configuration (a reload).
type IDs struct {
	t atomic.Pointer[idTable]
}

type idTable struct {
	upstreams map[string]Upstream
	proxy     map[string]ProxyIDStyle
}

var noIDs = &idTable{}

func (x *IDs) table() *idTable {
	if t := x.t.Load(); t != nil {
		return t
	}
	return noIDs
}

// New returns the ids of upstreams (by name) and of the accounts that
// issue proxy ids (message_id: proxy), by system_id, with their style. A
// style that cannot be issued is an error naming the account.
func New(upstreams map[string]Upstream, proxyIDs map[string]ProxyIDStyle) (*IDs, error) {
	x := &IDs{}
	if err := x.Set(upstreams, proxyIDs); err != nil {
		return nil, err
	}
	return x, nil
}

// Set puts the id formats of upstreams and the proxy id styles of
// accounts in force, or changes nothing and says which style cannot be
// issued.
func (x *IDs) Set(upstreams map[string]Upstream, proxyIDs map[string]ProxyIDStyle) error {
	for name, st := range proxyIDs {
		if err := st.Validate(); err != nil {
			return fmt.Errorf("account %s: %w", name, err)
		}
	}
	x.t.Store(&idTable{upstreams: upstreams, proxy: proxyIDs})
	return nil
}

// NormalizeID implements dedup.IDs: id as written in upstream's
// submit_sm_resp, in canonical form.
func (x *IDs) NormalizeID(upstream, id string) string {
	u := x.table().upstreams[upstream]
	return Normalize(id, u.RespIDFormat, u.ReceiptIDFormat)
}

// NormalizeReceiptID returns id as written in upstream's receipts, in
// canonical form.
func (x *IDs) NormalizeReceiptID(upstream, id string) string {
	u := x.table().upstreams[upstream]
	return Normalize(id, u.ReceiptIDFormat, u.RespIDFormat)
}

// RespIDFromReceipt converts an id written in upstream's receipts to the
// way upstream writes it in a submit_sm_resp.
func (x *IDs) RespIDFromReceipt(upstream, id string) string {
	u := x.table().upstreams[upstream]
	return Convert(id, u.ReceiptIDFormat, u.RespIDFormat)
}

// TwoReadings reports whether id, found in a receipt without anything
// telling how it is written (a receipted_message_id TLV and no text id),
// names two different messages: read as upstream writes ids in receipts,
// and as it writes them in a submit_sm_resp (which some SMSCs put in the
// TLV), when the two formats differ and id parses in both (a hex
// response format, decimal receipts, and an id of decimal digits).
func (x *IDs) TwoReadings(upstream, id string) bool {
	u := x.table().upstreams[upstream]
	resp, rcpt := effective(u.RespIDFormat, u.ReceiptIDFormat), effective(u.ReceiptIDFormat, u.RespIDFormat)
	if resp == rcpt {
		return false
	}
	a, ok1 := parseNumber(id, resp)
	b, ok2 := parseNumber(id, rcpt)
	return ok1 && ok2 && a.Cmp(b) != 0
}

// IssueID implements dedup.IDs: a new proxy id for an account with
// message_id: proxy, "" otherwise.
func (x *IDs) IssueID(account string) string {
	st, ok := x.table().proxy[account]
	if !ok {
		return ""
	}
	return NewProxyID(st)
}
