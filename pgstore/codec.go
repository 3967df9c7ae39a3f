package pgstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/smppproxy/smppproxy/state"
)

// The cold part of a record (the body column), version 1. Integers are Go
// varints; "str" is a uvarint length and the bytes; "time" is a uvarint n
// (0: the zero time, else n-1 nanoseconds) and a varint of Unix seconds.
//
//	byte    version (1)
//	[32]    Fingerprint, byte FingerprintVersion
//	str     Owner, str Upstream, str Session
//	uvarint Sequence
//	str     MessageID, str NormID, str ProxyID
//	[16]    AddrHash
//	str     Delivery, time DeliveryAt
//	uvarint Status, varint Attempts
//	time    Created, time Updated, time Expires
//	varint  Resends
//
// Key and State live in columns; each history event is one element of the
// history array:
//
//	time At, str State, uvarint Status, str Session, uvarint Sequence,
//	str MessageID, str Note
//
// A queue entry (the entry column; Queue and Seq are columns):
//
//	byte version (1), str DedupKey, str Kind, str Upstream, str MessageID,
//	str Stat, uvarint Command, str Body, time Enqueued, time Expires
const codecVersion1 = 1

// errCorrupt is wrapped by every decoding error.
var errCorrupt = errors.New("pgstore: corrupt row")

// maxHistory is the most events a stored history keeps: the first and the
// latest maxHistory-1 (state.MaxHistory once the state package has it).
const maxHistory = 64

func encodeBody(r *state.Record) []byte {
	b := make([]byte, 0, 128+len(r.Owner)+len(r.Upstream)+len(r.Session)+len(r.MessageID)+len(r.NormID)+len(r.ProxyID))
	b = append(b, codecVersion1)
	b = append(b, r.Fingerprint[:]...)
	b = append(b, r.FingerprintVersion)
	b = appendString(b, r.Owner)
	b = appendString(b, r.Upstream)
	b = appendString(b, r.Session)
	b = binary.AppendUvarint(b, uint64(r.Sequence))
	b = appendString(b, r.MessageID)
	b = appendString(b, r.NormID)
	b = appendString(b, r.ProxyID)
	b = append(b, r.AddrHash[:]...)
	b = appendString(b, string(r.Delivery))
	b = appendTime(b, r.DeliveryAt)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = appendTime(b, r.Created)
	b = appendTime(b, r.Updated)
	b = appendTime(b, r.Expires)
	return binary.AppendVarint(b, int64(r.Resends))
}

// decodeRecord rebuilds a record from its columns.
func decodeRecord(k state.Key, st string, body []byte, history [][]byte) (*state.Record, error) {
	if len(body) == 0 || body[0] != codecVersion1 {
		return nil, fmt.Errorf("%w: record %v: bad version", errCorrupt, k)
	}
	d := decoder{b: body[1:]}
	r := &state.Record{Key: k, State: state.SubmitState(st)}
	d.bytes(r.Fingerprint[:])
	r.FingerprintVersion = d.byte()
	r.Owner, r.Upstream, r.Session = d.str(), d.str(), d.str()
	r.Sequence = uint32(d.uvarint())
	r.MessageID, r.NormID, r.ProxyID = d.str(), d.str(), d.str()
	d.bytes(r.AddrHash[:])
	r.Delivery = state.DeliveryState(d.str())
	r.DeliveryAt = d.time()
	r.Status = uint32(d.uvarint())
	r.Attempts = int(d.varint())
	r.Created, r.Updated, r.Expires = d.time(), d.time(), d.time()
	r.Resends = int(d.varint())
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("record %v: %w", k, d.err)
	}
	if len(history) > 0 {
		r.History = make([]state.Event, len(history))
		for i, h := range history {
			if err := decodeEvent(h, &r.History[i]); err != nil {
				return nil, fmt.Errorf("record %v: event %d: %w", k, i, err)
			}
		}
	}
	return r, nil
}

func encodeEvent(e *state.Event) []byte {
	b := make([]byte, 0, 24+len(e.State)+len(e.Session)+len(e.MessageID)+len(e.Note))
	b = appendTime(b, e.At)
	b = appendString(b, string(e.State))
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = appendString(b, e.Session)
	b = binary.AppendUvarint(b, uint64(e.Sequence))
	b = appendString(b, e.MessageID)
	return appendString(b, e.Note)
}

func decodeEvent(b []byte, e *state.Event) error {
	d := decoder{b: b}
	e.At = d.time()
	e.State = state.SubmitState(d.str())
	e.Status = uint32(d.uvarint())
	e.Session = d.str()
	e.Sequence = uint32(d.uvarint())
	e.MessageID = d.str()
	e.Note = d.str()
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

func encodeEvents(h []state.Event) [][]byte {
	out := make([][]byte, len(h))
	for i := range h {
		out[i] = encodeEvent(&h[i])
	}
	return out
}

// capEvents keeps h within maxHistory: the first and the latest events.
func capEvents(h [][]byte) [][]byte {
	if len(h) <= maxHistory {
		return h
	}
	out := make([][]byte, 0, maxHistory)
	out = append(out, h[0])
	return append(out, h[len(h)-maxHistory+1:]...)
}

// historyDelta compares the stored history of a record (old) with the one
// a writer gives its next version (next), both encoded. When next is old
// with events appended (possibly trimmed like capEvents, keeping the first
// event) it returns those events; otherwise rewrite is true: the writer
// replaced the history and it is stored anew.
func historyDelta(old, next [][]byte) (added [][]byte, rewrite bool) {
	if len(old) == 0 {
		return next, false
	}
	if len(next) == 0 || !bytes.Equal(next[0], old[0]) {
		return nil, true
	}
	last := old[len(old)-1]
	lo := 1 // where old's last event may stand in next
	if len(old) == 1 {
		lo = 0
	}
	for i := len(next) - 1; i >= lo; i-- {
		if bytes.Equal(next[i], last) && tailMatches(old, next, i) {
			return next[i+1:], false
		}
	}
	return nil, true
}

// tailMatches reports whether the events before next[i] match those before
// old's last one, back to the first event (kept apart).
func tailMatches(old, next [][]byte, i int) bool {
	for t := 1; ; t++ {
		oi, ni := len(old)-1-t, i-t
		if oi < 1 || ni < 1 {
			return true
		}
		if !bytes.Equal(old[oi], next[ni]) {
			return false
		}
	}
}

// storedHistory is the history kept when a record with history old is
// written with history next.
func storedHistory(old, next [][]byte) [][]byte {
	added, rewrite := historyDelta(old, next)
	if rewrite {
		return capEvents(next)
	}
	return capEvents(append(old[:len(old):len(old)], added...))
}

func encodeEntry(e *state.QueueEntry) []byte {
	b := make([]byte, 0, 40+len(e.DedupKey)+len(e.Kind)+len(e.Upstream)+len(e.MessageID)+len(e.Stat)+len(e.Body))
	b = append(b, codecVersion1)
	b = appendString(b, e.DedupKey)
	b = appendString(b, e.Kind)
	b = appendString(b, e.Upstream)
	b = appendString(b, e.MessageID)
	b = appendString(b, e.Stat)
	b = binary.AppendUvarint(b, uint64(e.Command))
	b = binary.AppendUvarint(b, uint64(len(e.Body)))
	b = append(b, e.Body...)
	b = appendTime(b, e.Enqueued)
	return appendTime(b, e.Expires)
}

func decodeEntry(queue []byte, seq int64, b []byte) (*state.QueueEntry, error) {
	if len(b) == 0 || b[0] != codecVersion1 {
		return nil, fmt.Errorf("%w: queue entry %d: bad version", errCorrupt, seq)
	}
	d := decoder{b: b[1:]}
	e := &state.QueueEntry{Queue: string(queue), Seq: uint64(seq)}
	e.DedupKey, e.Kind, e.Upstream, e.MessageID, e.Stat = d.str(), d.str(), d.str(), d.str(), d.str()
	e.Command = uint32(d.uvarint())
	if body := d.str(); body != "" {
		e.Body = []byte(body)
	}
	e.Enqueued, e.Expires = d.time(), d.time()
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("queue entry %d: %w", seq, d.err)
	}
	return e, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(t.Nanosecond())+1)
	return binary.AppendVarint(dst, t.Unix())
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errCorrupt}, args...)...)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("short")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes(dst []byte) {
	if len(d.b) < len(dst) {
		d.fail("short")
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string of %d bytes past the end", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) time() time.Time {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return time.Time{}
	}
	if n > 1e9 {
		d.fail("bad nanoseconds")
		return time.Time{}
	}
	sec := d.varint()
	return time.Unix(sec, int64(n-1)).UTC()
}

// Column helpers.

// never is the expires_ns of a record or entry that does not expire.
const never = math.MaxInt64

// expiresNS is the expires_ns column of Expires t.
func expiresNS(t time.Time) int64 {
	if t.IsZero() {
		return never
	}
	return unixNano(t)
}

// unixNano is t in Unix nanoseconds, clamped to what int64 holds.
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64-1)):
		return math.MaxInt64 - 1
	}
	return t.UnixNano()
}

// col is s as a NOT NULL bytea argument.
func col(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

// optCol is s as a nullable bytea argument: NULL when empty.
func optCol(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// ownerInstance is the instance part of a record owner "instanceID/n":
// everything before the last "/" ("" when there is none), as valid text.
func ownerInstance(owner string) string {
	i := strings.LastIndexByte(owner, '/')
	if i < 0 {
		return ""
	}
	return textCol(owner[:i])
}

// textCol makes s storable in a text column: valid UTF-8 without NUL.
func textCol(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
