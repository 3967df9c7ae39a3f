package pgstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/smppproxy/smppproxy/internal/varcodec"
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
var errCorrupt = fmt.Errorf("pgstore: corrupt row (%w)", state.ErrCorrupt)

// maxHistory is the most events a stored history keeps: the first and the
// latest maxHistory-1, as the embedded store.
const maxHistory = state.MaxHistory

func encodeBody(r *state.Record) []byte {
	b := make([]byte, 0, 128+len(r.Owner)+len(r.Upstream)+len(r.Session)+len(r.MessageID)+len(r.NormID)+len(r.ProxyID))
	b = append(b, codecVersion1)
	b = append(b, r.Fingerprint[:]...)
	b = append(b, r.FingerprintVersion)
	b = varcodec.AppendString(b, r.Owner)
	b = varcodec.AppendString(b, r.Upstream)
	b = varcodec.AppendString(b, r.Session)
	b = binary.AppendUvarint(b, uint64(r.Sequence))
	b = varcodec.AppendString(b, r.MessageID)
	b = varcodec.AppendString(b, r.NormID)
	b = varcodec.AppendString(b, r.ProxyID)
	b = append(b, r.AddrHash[:]...)
	b = varcodec.AppendString(b, string(r.Delivery))
	b = varcodec.AppendTime(b, r.DeliveryAt)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = varcodec.AppendTime(b, r.Created)
	b = varcodec.AppendTime(b, r.Updated)
	b = varcodec.AppendTime(b, r.Expires)
	return binary.AppendVarint(b, int64(r.Resends))
}

// decodeRecord rebuilds a record from its columns.
func decodeRecord(k state.Key, st string, body []byte, history [][]byte) (*state.Record, error) {
	if len(body) == 0 || body[0] != codecVersion1 {
		return nil, fmt.Errorf("%w: record %v: bad version", errCorrupt, k)
	}
	d := varcodec.Sharing(body[1:], errCorrupt)
	r := &state.Record{Key: k, State: state.SubmitState(st)}
	d.Bytes(r.Fingerprint[:])
	r.FingerprintVersion = d.Byte()
	r.Owner, r.Upstream, r.Session = d.Str(), d.Str(), d.Str()
	r.Sequence = uint32(d.Uvarint())
	r.MessageID, r.NormID, r.ProxyID = d.Str(), d.Str(), d.Str()
	d.Bytes(r.AddrHash[:])
	r.Delivery = state.DeliveryState(d.Str())
	r.DeliveryAt = d.Time()
	r.Status = uint32(d.Uvarint())
	r.Attempts = int(d.Varint())
	r.Created, r.Updated, r.Expires = d.Time(), d.Time(), d.Time()
	r.Resends = int(d.Varint())
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, fmt.Errorf("record %v: %w", k, d.Err)
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
	b = varcodec.AppendTime(b, e.At)
	b = varcodec.AppendString(b, string(e.State))
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = varcodec.AppendString(b, e.Session)
	b = binary.AppendUvarint(b, uint64(e.Sequence))
	b = varcodec.AppendString(b, e.MessageID)
	return varcodec.AppendString(b, e.Note)
}

func decodeEvent(b []byte, e *state.Event) error {
	d := varcodec.Decoder{Corrupt: errCorrupt, B: b}
	e.At = d.Time()
	e.State = state.SubmitState(d.Str())
	e.Status = uint32(d.Uvarint())
	e.Session = d.Str()
	e.Sequence = uint32(d.Uvarint())
	e.MessageID = d.Str()
	e.Note = d.Str()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	return d.Err
}

func encodeEvents(h []state.Event) [][]byte {
	out := make([][]byte, len(h))
	for i := range h {
		out[i] = encodeEvent(&h[i])
	}
	return out
}

// sameBytes: two encoded events are the same event.
func sameBytes(a, b *[]byte) bool { return bytes.Equal(*a, *b) }

func encodeEntry(e *state.QueueEntry) []byte {
	b := make([]byte, 0, 40+len(e.DedupKey)+len(e.Kind)+len(e.Upstream)+len(e.MessageID)+len(e.Stat)+len(e.Body))
	b = append(b, codecVersion1)
	b = varcodec.AppendString(b, e.DedupKey)
	b = varcodec.AppendString(b, e.Kind)
	b = varcodec.AppendString(b, e.Upstream)
	b = varcodec.AppendString(b, e.MessageID)
	b = varcodec.AppendString(b, e.Stat)
	b = binary.AppendUvarint(b, uint64(e.Command))
	b = binary.AppendUvarint(b, uint64(len(e.Body)))
	b = append(b, e.Body...)
	b = varcodec.AppendTime(b, e.Enqueued)
	return varcodec.AppendTime(b, e.Expires)
}

func decodeEntry(queue []byte, seq int64, b []byte) (*state.QueueEntry, error) {
	if len(b) == 0 || b[0] != codecVersion1 {
		return nil, fmt.Errorf("%w: queue entry %d: bad version", errCorrupt, seq)
	}
	d := varcodec.Sharing(b[1:], errCorrupt)
	e := &state.QueueEntry{Queue: string(queue), Seq: uint64(seq)}
	e.DedupKey, e.Kind, e.Upstream, e.MessageID, e.Stat = d.Str(), d.Str(), d.Str(), d.Str(), d.Str()
	e.Command = uint32(d.Uvarint())
	if body := d.Str(); body != "" {
		e.Body = []byte(body)
	}
	e.Enqueued, e.Expires = d.Time(), d.Time()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, fmt.Errorf("queue entry %d: %w", seq, d.Err)
	}
	return e, nil
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

// textCol makes s storable in a text column: valid UTF-8 without NUL.
func textCol(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
