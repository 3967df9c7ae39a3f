package state

import (
	"encoding/binary"
	"fmt"
	"github.com/smppproxy/smppproxy/internal/varcodec"
	"strings"
	"time"
)

// Record encoding, shared by every backend that stores bytes.
//
// Version 1 layout (all integers are Go varints from encoding/binary;
// "str" is a uvarint length followed by that many bytes; "time" is a uvarint
// n where n == 0 means the zero time, otherwise n-1 is the nanosecond part,
// followed by a varint of Unix seconds):
//
//	byte    version (1)
//	str     Key.Account, str Key.Key, str Key.Segment
//	[32]    Fingerprint
//	str     State, str Owner, str Upstream, str Session
//	uvarint Sequence
//	str     MessageID
//	uvarint Status
//	varint  Attempts
//	time    Created, time Updated, time Expires
//	uvarint len(History), then per event:
//	        time At, str State, uvarint Status, str Session,
//	        uvarint Sequence, str MessageID, str Note
//
// Version 2 (written since receipts were added) is version 1 with the
// version byte 2 and, after the history:
//
//	str     NormID, str ProxyID
//	[16]    AddrHash
//	str     Delivery
//	time    DeliveryAt
//
// Version 3 (written since resends are counted and fingerprints are
// versioned) is version 2 with the version byte 3 and, after DeliveryAt:
//
//	varint  Resends
//	byte    FingerprintVersion
//
// A record of version 1 or 2 decodes with FingerprintVersion
// FingerprintSHA256 (its fingerprint is the unsalted SHA-256 of those
// versions) and with Resends counted once from the history events whose
// note is LegacyResendNote (how those versions kept the fact); nothing
// reads the history of a record of version 3.
//
// Version 4 (written by BadgerStore since history moved out of the
// record) is the hot record alone, compact, with the history kept apart as
// an append-only event log (see histKey):
//
//	byte    version (4)
//	str     Key.Account, str Key.Key, str Key.Segment
//	[32]    Fingerprint
//	byte    FingerprintVersion
//	byte    State code (stateCodes; 0: a str with the state follows)
//	str     Owner, str Upstream, str Session
//	uvarint Sequence
//	str     MessageID, str NormID, str ProxyID
//	byte    0 (AddrHash zero) or 1 followed by [16] AddrHash
//	byte    Delivery code (deliveryCodes; 0xff: a str follows)
//	time    DeliveryAt
//	uvarint Status
//	varint  Attempts, varint Resends
//	time    Created, time Updated, time Expires
//	uvarint the number of history events logged (the next event's
//	        sequence number in the log)
//	byte    0, or 1 followed by the first history event (as in version 1):
//	        the first event is kept with the record (it never changes but
//	        when the history is replaced), the others in the log from
//	        sequence number 1 on
//
// Version 5 (written since short histories are kept with the record) is
// version 4 with the version byte 5 and, instead of its last field:
//
//	uvarint m, the number of history events kept with the record, then
//	        those m events (as in version 1): the events of sequence
//	        numbers 0 to m-1, the log holding the others from m on (a
//	        record keeps its whole history while it is short, then only
//	        its first event: see plan)
//
// An event of the log (version byte 1) is encoded as one event of the
// version 1 history above.
//
// Nothing may follow the last field. A new field means a new version; the
// decoder keeps reading every older version it knows. Decoded times are in
// UTC without a monotonic reading.
const (
	recordVersion1 = 1
	recordVersion2 = 2
	recordVersion3 = 3
	recordVersion4 = 4
	recordVersion5 = 5
	eventVersion1  = 1
)

// stateCodes and deliveryCodes are the one-byte codes of version 4; the
// index is the code (0 and 0xff are reserved for "a string follows").
var (
	stateCodes    = [...]SubmitState{1: Sent, 2: Accepted, 3: Rejected, 4: Unknown, 5: Retryable}
	deliveryCodes = [...]DeliveryState{0: "", 1: DeliveryEnroute, 2: DeliveryDelivered, 3: DeliveryExpired, 4: DeliveryDeleted,
		5: DeliveryUndeliverable, 6: DeliveryAccepted, 7: DeliveryUnknown, 8: DeliveryRejected, 9: DeliverySkipped}
)

// LegacyResendNote is the history note with which records of codec
// versions 1 and 2 marked a resend under on_unknown: resend_after.
const LegacyResendNote = "on_unknown resend_after: retry forwards again"

// errCorrupt is wrapped by every decoding error.
var errCorrupt = ErrCorrupt

// encodeRecord appends the version 3 encoding of r (history inline) to
// dst: MemStore's form. BadgerStore writes encodeHot and the event log.
func encodeRecord(dst []byte, r *Record) []byte {
	return encodeRecordVersion(dst, r, recordVersion3)
}

// encodeHot appends the version 5 encoding of r to dst, with the events
// of r.History kept with the record (the first ones of its history; the
// others are logged apart); histN is the number of events logged for it.
func encodeHot(dst []byte, r *Record, histN uint32) []byte {
	return encodeHotVersion(dst, r, histN, recordVersion5)
}

// hotSize bounds the length of r's encodeHot (counting 10 bytes for a
// varint, 15 for a time, 3 for a string's length): what to allocate for it
// at once.
func hotSize(r *Record) int {
	n := 192 + len(r.Key.Account) + len(r.Key.Key) + len(r.Key.Segment) + len(r.State) + len(r.Owner) +
		len(r.Upstream) + len(r.Session) + len(r.MessageID) + len(r.NormID) + len(r.ProxyID) + len(r.Delivery)
	for i := range r.History {
		n += eventSize(&r.History[i])
	}
	return n
}

// eventSize bounds the length of e's encodeEvent (see hotSize).
func eventSize(e *Event) int {
	return 48 + len(e.State) + len(e.Session) + len(e.MessageID) + len(e.Note)
}

// encodeHotVersion is encodeHot in version 4 (which keeps at most the
// first event: the others of r.History are left out) or 5.
func encodeHotVersion(dst []byte, r *Record, histN uint32, version byte) []byte {
	dst = append(dst, version)
	dst = varcodec.AppendString(dst, r.Key.Account)
	dst = varcodec.AppendString(dst, r.Key.Key)
	dst = varcodec.AppendString(dst, r.Key.Segment)
	dst = append(dst, r.Fingerprint[:]...)
	dst = append(dst, r.FingerprintVersion)
	dst = appendCode(dst, string(r.State), stateCodes[:], 0)
	dst = varcodec.AppendString(dst, r.Owner)
	dst = varcodec.AppendString(dst, r.Upstream)
	dst = varcodec.AppendString(dst, r.Session)
	dst = binary.AppendUvarint(dst, uint64(r.Sequence))
	dst = varcodec.AppendString(dst, r.MessageID)
	dst = varcodec.AppendString(dst, r.NormID)
	dst = varcodec.AppendString(dst, r.ProxyID)
	if r.AddrHash == ([16]byte{}) {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = append(dst, r.AddrHash[:]...)
	}
	dst = appendCode(dst, string(r.Delivery), deliveryCodes[:], 0xff)
	dst = varcodec.AppendTime(dst, r.DeliveryAt)
	dst = binary.AppendUvarint(dst, uint64(r.Status))
	dst = binary.AppendVarint(dst, int64(r.Attempts))
	dst = binary.AppendVarint(dst, int64(r.Resends))
	dst = varcodec.AppendTime(dst, r.Created)
	dst = varcodec.AppendTime(dst, r.Updated)
	dst = varcodec.AppendTime(dst, r.Expires)
	dst = binary.AppendUvarint(dst, uint64(histN))
	if version == recordVersion5 {
		dst = binary.AppendUvarint(dst, uint64(len(r.History)))
		for i := range r.History {
			dst = appendEventBody(dst, &r.History[i])
		}
		return dst
	}
	if len(r.History) == 0 {
		return append(dst, 0)
	}
	return appendEventBody(append(dst, 1), &r.History[0])
}

// appendCode appends the code of v in codes, or escape and v as a string.
func appendCode[T ~string](dst []byte, v string, codes []T, escape byte) []byte {
	for i, c := range codes {
		if string(c) == v && byte(i) != escape && (i != 0 || escape != 0) {
			return append(dst, byte(i))
		}
	}
	dst = append(dst, escape)
	return varcodec.AppendString(dst, v)
}

// code reads what appendCode wrote.
func code[T ~string](d *varcodec.Decoder, codes []T, escape byte) T {
	var c [1]byte
	d.Bytes(c[:])
	if d.Err != nil {
		return ""
	}
	if c[0] == escape {
		return T(d.Str())
	}
	if int(c[0]) >= len(codes) || (c[0] == 0 && escape == 0) {
		d.Fail("unknown code %d", c[0])
		return ""
	}
	return codes[c[0]]
}

// decodeHot decodes a version 4 or 5 record (b without its version
// byte).
func decodeHot(b []byte, version byte) (*Record, uint32, error) {
	d := varcodec.Sharing(b, errCorrupt)
	r := &Record{}
	r.Key.Account = d.Str()
	r.Key.Key = d.Str()
	r.Key.Segment = d.Str()
	d.Bytes(r.Fingerprint[:])
	var fv [1]byte
	d.Bytes(fv[:])
	r.FingerprintVersion = fv[0]
	r.State = code(&d, stateCodes[:], 0)
	r.Owner = d.Str()
	r.Upstream = d.Str()
	r.Session = d.Str()
	r.Sequence = d.U32()
	r.MessageID = d.Str()
	r.NormID = d.Str()
	r.ProxyID = d.Str()
	var flag [1]byte
	d.Bytes(flag[:])
	switch {
	case d.Err != nil:
	case flag[0] == 1:
		d.Bytes(r.AddrHash[:])
	case flag[0] != 0:
		d.Fail("address flag %d", flag[0])
	}
	r.Delivery = code(&d, deliveryCodes[:], 0xff)
	r.DeliveryAt = d.Time()
	r.Status = d.U32()
	r.Attempts = d.Int()
	r.Resends = d.Int()
	r.Created = d.Time()
	r.Updated = d.Time()
	r.Expires = d.Time()
	n := d.U32()
	if version == recordVersion5 {
		m := d.U32()
		switch {
		case d.Err != nil:
		case m > MaxHistory:
			d.Fail("%d events kept with the record", m)
		case m > 0:
			r.History = make([]Event, m)
			for i := range r.History {
				readEvent(&d, &r.History[i])
			}
		}
	} else {
		var first [1]byte
		d.Bytes(first[:])
		switch {
		case d.Err != nil:
		case first[0] == 1:
			r.History = make([]Event, 1)
			readEvent(&d, &r.History[0])
		case first[0] != 0:
			d.Fail("first event flag %d", first[0])
		}
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, 0, d.Err
	}
	return r, n, nil
}

// encodeEvent appends the encoding of one event of the log.
func encodeEvent(dst []byte, e *Event) []byte {
	dst = append(dst, eventVersion1)
	return appendEventBody(dst, e)
}

func appendEventBody(dst []byte, e *Event) []byte {
	dst = varcodec.AppendTime(dst, e.At)
	dst = varcodec.AppendString(dst, string(e.State))
	dst = binary.AppendUvarint(dst, uint64(e.Status))
	dst = varcodec.AppendString(dst, e.Session)
	dst = binary.AppendUvarint(dst, uint64(e.Sequence))
	dst = varcodec.AppendString(dst, e.MessageID)
	return varcodec.AppendString(dst, e.Note)
}

// readEvent reads the body of an event (appendEventBody) from d.
func readEvent(d *varcodec.Decoder, e *Event) {
	e.At = d.Time()
	e.State = SubmitState(d.Str())
	e.Status = d.U32()
	e.Session = d.Str()
	e.Sequence = d.U32()
	e.MessageID = d.Str()
	e.Note = d.Str()
}

// decodeEvent decodes what encodeEvent wrote.
func decodeEvent(b []byte) (Event, error) {
	var e Event
	if len(b) == 0 || b[0] != eventVersion1 {
		return e, fmt.Errorf("%w: event version", errCorrupt)
	}
	d := varcodec.Decoder{Corrupt: errCorrupt, B: b[1:]}
	readEvent(&d, &e)
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return Event{}, d.Err
	}
	return e, nil
}

// encodeRecordVersion appends the encoding of r in version v (older
// versions are written by tests only, to check that they still decode).
func encodeRecordVersion(dst []byte, r *Record, v byte) []byte {
	dst = append(dst, v)
	dst = varcodec.AppendString(dst, r.Key.Account)
	dst = varcodec.AppendString(dst, r.Key.Key)
	dst = varcodec.AppendString(dst, r.Key.Segment)
	dst = append(dst, r.Fingerprint[:]...)
	dst = varcodec.AppendString(dst, string(r.State))
	dst = varcodec.AppendString(dst, r.Owner)
	dst = varcodec.AppendString(dst, r.Upstream)
	dst = varcodec.AppendString(dst, r.Session)
	dst = binary.AppendUvarint(dst, uint64(r.Sequence))
	dst = varcodec.AppendString(dst, r.MessageID)
	dst = binary.AppendUvarint(dst, uint64(r.Status))
	dst = binary.AppendVarint(dst, int64(r.Attempts))
	dst = varcodec.AppendTime(dst, r.Created)
	dst = varcodec.AppendTime(dst, r.Updated)
	dst = varcodec.AppendTime(dst, r.Expires)
	dst = binary.AppendUvarint(dst, uint64(len(r.History)))
	for i := range r.History {
		dst = appendEventBody(dst, &r.History[i])
	}
	if v < recordVersion2 {
		return dst
	}
	dst = varcodec.AppendString(dst, r.NormID)
	dst = varcodec.AppendString(dst, r.ProxyID)
	dst = append(dst, r.AddrHash[:]...)
	dst = varcodec.AppendString(dst, string(r.Delivery))
	dst = varcodec.AppendTime(dst, r.DeliveryAt)
	if v < recordVersion3 {
		return dst
	}
	dst = binary.AppendVarint(dst, int64(r.Resends))
	return append(dst, r.FingerprintVersion)
}

// decodeRecord decodes what encodeRecord or encodeHot wrote (a record of
// version 4 or 5 comes with the events kept with it only). It copies everything it keeps, so
// b may be reused afterwards.
func decodeRecord(b []byte) (*Record, error) {
	r, _, _, err := decodeStored(b)
	return r, err
}

// decodeStored decodes a stored record of any version. For versions 4
// and 5 it also returns the number of events logged (hot is true, History
// holds the events kept with the record: the first ones);
// for the older versions the history is inline and histN is its length.
func decodeStored(b []byte) (r *Record, histN uint32, hot bool, err error) {
	if len(b) == 0 {
		return nil, 0, false, fmt.Errorf("%w: empty", errCorrupt)
	}
	if b[0] == recordVersion4 || b[0] == recordVersion5 {
		r, histN, err = decodeHot(b[1:], b[0])
		return r, histN, true, err
	}
	r, err = decodeInline(b)
	if err != nil {
		return nil, 0, false, err
	}
	return r, uint32(len(r.History)), false, nil
}

// peekStateExpires reads the state and the expiry of a record encoded in
// version 4 or 5 and nothing else (it allocates nothing, and checks
// nothing after the expiry): what a count of records by state needs.
// ok=false for the other versions, which the caller decodes whole. It
// follows decodeHot field by field (a fuzz test holds the two together).
func peekStateExpires(b []byte) (st SubmitState, expires time.Time, ok bool, err error) {
	if len(b) == 0 || (b[0] != recordVersion4 && b[0] != recordVersion5) {
		return "", time.Time{}, false, nil
	}
	d := varcodec.Decoder{Corrupt: errCorrupt, B: b[1:]}
	d.SkipStr() // account
	d.SkipStr() // key
	d.SkipStr() // segment
	var fp [32 + 1]byte
	d.Bytes(fp[:]) // fingerprint and its version
	st = code(&d, stateCodes[:], 0)
	d.SkipStr() // owner
	d.SkipStr() // upstream
	d.SkipStr() // session
	d.U32()     // sequence
	d.SkipStr() // message id
	d.SkipStr() // normalised id
	d.SkipStr() // proxy id
	var flag [1]byte
	d.Bytes(flag[:])
	switch {
	case d.Err != nil:
	case flag[0] == 1:
		var h [16]byte
		d.Bytes(h[:])
	case flag[0] != 0:
		d.Fail("address flag %d", flag[0])
	}
	code(&d, deliveryCodes[:], 0xff)
	d.Time() // delivery at
	d.U32()  // status
	d.Int()  // attempts
	d.Int()  // resends
	d.Time() // created
	d.Time() // updated
	expires = d.Time()
	if d.Err != nil {
		return "", time.Time{}, true, d.Err
	}
	return st, expires, true, nil
}

// decodeInline decodes versions 1 to 3.
func decodeInline(b []byte) (*Record, error) {
	version := b[0]
	if version < recordVersion1 || version > recordVersion3 {
		return nil, fmt.Errorf("%w: unknown version %d", errCorrupt, b[0])
	}
	d := varcodec.Sharing(b[1:], errCorrupt)
	r := &Record{}
	r.Key.Account = d.Str()
	r.Key.Key = d.Str()
	r.Key.Segment = d.Str()
	d.Bytes(r.Fingerprint[:])
	r.State = SubmitState(d.Str())
	r.Owner = d.Str()
	r.Upstream = d.Str()
	r.Session = d.Str()
	r.Sequence = d.U32()
	r.MessageID = d.Str()
	r.Status = d.U32()
	r.Attempts = d.Int()
	r.Created = d.Time()
	r.Updated = d.Time()
	r.Expires = d.Time()
	n := d.Uvarint()
	// Every event takes at least 7 bytes: a cheap bound that keeps a
	// corrupt count from allocating gigabytes.
	if d.Err == nil && n > uint64(len(d.B)/7) {
		d.Fail("history length %d", n)
	}
	if d.Err == nil && n > 0 {
		r.History = make([]Event, n)
		for i := range r.History {
			readEvent(&d, &r.History[i])
		}
	}
	if version >= recordVersion2 {
		r.NormID = d.Str()
		r.ProxyID = d.Str()
		d.Bytes(r.AddrHash[:])
		r.Delivery = DeliveryState(d.Str())
		r.DeliveryAt = d.Time()
	}
	if version >= recordVersion3 {
		r.Resends = d.Int()
		var fv [1]byte
		d.Bytes(fv[:])
		r.FingerprintVersion = fv[0]
	} else {
		r.FingerprintVersion = FingerprintSHA256
		r.Resends = legacyResends(r.History)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return r, nil
}

// legacyResends counts the resends a record of version 1 or 2 noted in
// its history (the codec upgrade of such a record; see LegacyResendNote).
func legacyResends(h []Event) int {
	n := 0
	for i := range h {
		if h[i].Note == LegacyResendNote {
			n++
		}
	}
	return n
}

// Key layout of byte-oriented backends (Badger). Every component is
// escaped so that it contains no 0x00 byte: 0x00 becomes 0x01 0x01 and
// 0x01 becomes 0x01 0x02. A 0x00 therefore always separates components and
// two different tuples never share a key (idempotency keys are client
// bytes and may contain anything).
//
//	r/<account>\x00<key>\x00<segment>      → encoded Record
//	m/<upstream>\x00<match id>             → record key (index, Record.MatchID)
//	p/<account>\x00<proxy id>              → record key (proxy id index)
//	u/<upstream>\x00<addr hash>\x00<record key> → record key (unknown records
//	                                         by addresses; only while Unknown)
//	q/<queue>\x00<seq, 8 bytes BE>         → encoded QueueEntry (with the
//	                                         commit log, in Badger only once
//	                                         the log no longer holds it:
//	                                         heldlog.go)
//	d/<queue>\x00<dedup key>               → dedup marker of a queue entry
//	h/<account>\x00<key>\x00<segment>\x00<seq, 4 bytes BE> → one event of
//	                                         the record's history (histKey;
//	                                         from the number of events the record
//	                                         keeps with it on: 1, or none while its
//	                                         history is kept whole with it)
//	s/<account>\x00<key>\x00<segment>      → "" while the record is Sent
//	                                         (sentKey; ScanState; with the
//	                                         commit log, in Badger only once
//	                                         the log no longer holds it:
//	                                         heldlog.go)
//	x/qseq                                  → last queue sequence number
//	x/marker                                → the store's marker (JSON; marker.go)
//	x/hwm                                   → commits made, last commit time (hwm.go)
//
// Index entries carry the TTL of their record. Lookups through an index
// always load the record and check that it still has those fields, so a
// stale index entry is never an answer.
//
// Earlier versions also wrote a journal index, j/<session>\x00<sequence,
// 4 bytes BE> → record key. It is no longer written and nothing reads it:
// the entries a store of such a version holds stay until their TTL drops
// them (an update of the record leaves them alone).
const (
	prefixRecord  = "r/"
	prefixMessage = "m/"
	prefixProxyID = "p/"
	prefixUnknown = "u/"
	prefixQueue   = "q/"
	prefixDedup   = "d/"
	prefixHistory = "h/"
	prefixSent    = "s/"
	keyQueueSeq   = "x/qseq"
)

func appendEscaped(dst []byte, s string) []byte {
	if !strings.ContainsAny(s, "\x00\x01") {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case 0x00:
			dst = append(dst, 0x01, 0x01)
		case 0x01:
			dst = append(dst, 0x01, 0x02)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func recordKey(k Key) []byte {
	b := make([]byte, 0, len(prefixRecord)+len(k.Account)+len(k.Key)+len(k.Segment)+2)
	b = append(b, prefixRecord...)
	b = appendEscaped(b, k.Account)
	b = append(b, 0)
	b = appendEscaped(b, k.Key)
	b = append(b, 0)
	return appendEscaped(b, k.Segment)
}

func messageKey(upstream, id string) []byte {
	b := make([]byte, 0, len(prefixMessage)+len(upstream)+len(id)+1)
	b = append(b, prefixMessage...)
	b = appendEscaped(b, upstream)
	b = append(b, 0)
	return appendEscaped(b, id)
}

func proxyIDKey(account, id string) []byte {
	b := make([]byte, 0, len(prefixProxyID)+len(account)+len(id)+1)
	b = append(b, prefixProxyID...)
	b = appendEscaped(b, account)
	b = append(b, 0)
	return appendEscaped(b, id)
}

// unknownPrefix is the common prefix of the unknown-index entries of
// upstream and h; unknownKey appends the record key.
func unknownPrefix(upstream string, h [16]byte) []byte {
	b := make([]byte, 0, len(prefixUnknown)+len(upstream)+40)
	b = append(b, prefixUnknown...)
	b = appendEscaped(b, upstream)
	b = append(b, 0)
	b = appendEscaped(b, string(h[:]))
	return append(b, 0)
}

func unknownKey(upstream string, h [16]byte, k Key) []byte {
	return append(unknownPrefix(upstream, h), recordKey(k)...)
}

// inUnknownIndex reports whether r belongs in the unknown index.
func inUnknownIndex(r *Record) bool {
	return r.State == Unknown && r.Upstream != "" && r.AddrHash != [16]byte{}
}

// indexKeys returns the index keys under which r must be found: the
// message index once it has a MessageID, the proxy id index once it has a
// ProxyID, and the unknown index while it is Unknown with an upstream and
// addresses. r may be nil. The journal (Upstream, Session, Sequence) is
// the record's own fields and has no index.
func indexKeys(r *Record) [][]byte {
	if r == nil {
		return nil
	}
	var ks [][]byte
	if id := r.MatchID(); id != "" {
		ks = append(ks, messageKey(r.Upstream, id))
	}
	if r.ProxyID != "" {
		ks = append(ks, proxyIDKey(r.Key.Account, r.ProxyID))
	}
	if inUnknownIndex(r) {
		ks = append(ks, unknownKey(r.Upstream, r.AddrHash, r.Key))
	}
	return ks
}

// histPrefix is the common prefix of the history events of the record
// under rk (a recordKey).
func histPrefix(rk []byte) []byte {
	b := make([]byte, 0, len(rk)+5)
	b = append(b, prefixHistory...)
	b = append(b, rk[len(prefixRecord):]...)
	return append(b, 0)
}

// histKey is the key of event seq of the record under rk.
func histKey(rk []byte, seq uint32) []byte {
	return binary.BigEndian.AppendUint32(histPrefix(rk), seq)
}

// sentKey is the key of the record under rk in the index of Sent records.
func sentKey(rk []byte) []byte {
	b := make([]byte, 0, len(rk))
	b = append(b, prefixSent...)
	return append(b, rk[len(prefixRecord):]...)
}

// recordKeyOfSent turns a sentKey back into the record key.
func recordKeyOfSent(sk []byte) []byte {
	b := make([]byte, 0, len(sk))
	b = append(b, prefixRecord...)
	return append(b, sk[len(prefixSent):]...)
}
