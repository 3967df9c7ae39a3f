// Package state keeps the proxy's durable records: one Record per
// (account, idempotency key, segment), the journal of what was written to
// which upstream session, the indexes from upstream message ids, proxy
// message ids and (for unknown records) addresses back to records, and the
// durable queues of receipts and MO waiting for an ESME; and the
// per-install fingerprint secret (Secret, kept by a SecretKeeper: FileSecret
// in the store directory). Store and Queue are the small interfaces the
// rest of the proxy uses; BadgerStore is the
// production backend of both (pipelined group commit: many concurrent
// writers share one transaction and one sync, gathered while the previous
// one syncs) and MemStore is the in-memory backend for
// unit tests. Both pass the same conformance suite in state/storetest.
// OpenBadger refuses a directory that lost data (ErrStoreDamaged: a
// damaged MANIFEST or table, a missing marker, commits lost with the tail
// of the write-ahead log; see marker.go) unless forced.
package state

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"
)

// Errors returned by every Store. Compare with errors.Is.
var (
	// ErrNotFound: no live (unexpired) record under that key.
	ErrNotFound = errors.New("state: not found")
	// ErrClosed: the store was closed; nothing was written.
	ErrClosed = errors.New("state: store closed")
	// ErrAbort may be returned by an Update function to leave the record
	// untouched; Update then returns it unchanged with ErrAbort.
	ErrAbort = errors.New("state: update aborted")
	// ErrCorrupt: what is stored under the key cannot be decoded (damaged,
	// or written by a newer version); nothing was written over it.
	ErrCorrupt = errors.New("state: corrupt record")
	// ErrLeaseLost: this instance does not hold its lease on a store
	// shared by several instances, so nothing that would let it write
	// upstream (a record created or journaled) was written.
	ErrLeaseLost = errors.New("state: instance lease not held")
	// ErrTakenOver: on a store shared by several instances, the record
	// was no longer its writer's to write (another instance took it over),
	// or the writing process no longer holds its instance (another process
	// started with its id); nothing was written, and writing again will
	// not succeed.
	ErrTakenOver = errors.New("state: taken over by another writer")
)

// SubmitState is where a record stands in the submit state machine (SPEC §3).
type SubmitState string

const (
	// Sent: the owner recorded the submit and may have written it upstream.
	Sent SubmitState = "sent"
	// Accepted: the upstream answered status 0 with a message id.
	Accepted SubmitState = "accepted"
	// Rejected: the upstream answered a permanent error.
	Rejected SubmitState = "rejected"
	// Unknown: the outcome is ambiguous (timeout, session lost, crash).
	Unknown SubmitState = "unknown"
	// Retryable: nothing was accepted upstream; the next submit forwards again.
	Retryable SubmitState = "retryable"
)

// Key identifies a record: the key scope of SPEC §2.
type Key struct {
	Account string
	Key     string // the client's idempotency key (or a fingerprint in hex)
	Segment string // "seq/total" for a part of a concatenated message, else ""
}

// Event is one transition in a record's history.
type Event struct {
	At    time.Time   `json:"at"`
	State SubmitState `json:"state"`
	// Status is the SMPP status involved (upstream answer or what the ESME got).
	Status uint32 `json:"status,omitempty"`
	// Upstream session and sequence number for a forward, when relevant.
	Session   string `json:"session,omitempty"`
	Sequence  uint32 `json:"sequence,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Note      string `json:"note,omitempty"`
}

// Record is what the store keeps per key. It never holds message text: the
// content is represented by its fingerprint only.
type Record struct {
	Key         Key         `json:"key"`
	Fingerprint [32]byte    `json:"fingerprint"`
	State       SubmitState `json:"state"`
	// Owner identifies the attempt that currently owns the record (the one
	// allowed to forward); a new owner takes over a Retryable record.
	Owner string `json:"owner"`
	// Upstream, Session and Sequence: where the last forward was written
	// (the per-upstream-session journal of SPEC §3.4).
	Upstream string `json:"upstream,omitempty"`
	Session  string `json:"session,omitempty"`
	Sequence uint32 `json:"sequence,omitempty"`
	// MessageID is the upstream's id once Accepted, exactly as the
	// upstream wrote it in its submit_sm_resp.
	MessageID string `json:"message_id,omitempty"`
	// NormID is MessageID normalised by the upstream's id formats (the
	// form receipts are matched in). The message index is keyed by it
	// when it is set, else by MessageID: see MatchID.
	NormID string `json:"norm_id,omitempty"`
	// ProxyID is the proxy-issued message id the ESME is given under
	// message_id: proxy; empty when the ESME is given MessageID. See
	// ClientMessageID.
	ProxyID string `json:"proxy_id,omitempty"`
	// AddrHash identifies the submit's source and destination addresses
	// without storing them (HashAddrs); zero when unknown. It lets an
	// unmatched receipt find an unknown record (SPEC §5).
	AddrHash [16]byte `json:"-"`
	// Delivery is what the last receipt said about the message, kept apart
	// from the submit State; DeliveryAt is when the proxy received it.
	Delivery   DeliveryState `json:"delivery,omitempty"`
	DeliveryAt time.Time     `json:"delivery_at,omitzero"`
	// Status is the last upstream status (the one replayed when Rejected
	// or Retryable).
	Status   uint32    `json:"status,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	// Expires: after this instant the record is treated as absent (a new
	// operation) and may be dropped by the backend.
	Expires time.Time `json:"expires"`
	// Resends counts the forwards of the record after an unknown outcome
	// (on_unknown: resend_after, resend). Decisions read it, never History.
	Resends int `json:"resends,omitempty"`
	// FingerprintVersion says how Fingerprint was computed: FingerprintHMAC
	// (current) or FingerprintSHA256 (records written before the secret;
	// 0 means the same). A record is compared with a retry's fingerprint
	// of its own version.
	FingerprintVersion uint8 `json:"fingerprint_version,omitempty"`
	// History is for operators only: it keeps the first event and the
	// latest ones (MaxHistory in all), so no decision may depend on it.
	// Stores keep it apart from the rest of the record and append to it.
	History []Event `json:"history,omitempty"`
}

// Fingerprint versions (Record.FingerprintVersion).
const (
	// FingerprintSHA256: unsalted SHA-256 of the submit's significant
	// parameters (records of codec versions 1 and 2).
	FingerprintSHA256 uint8 = 1
	// FingerprintHMAC: HMAC-SHA256 of the same under the per-install
	// secret (Secret).
	FingerprintHMAC uint8 = 2
)

// ClientMessageID is the message id the ESME was given in its
// submit_sm_resp: ProxyID when the proxy issued one, else MessageID.
func (r *Record) ClientMessageID() string {
	if r.ProxyID != "" {
		return r.ProxyID
	}
	return r.MessageID
}

// MatchID is the id the message index (ByMessageID) knows the record by:
// NormID when set, else MessageID; "" before the record is accepted.
func (r *Record) MatchID() string {
	if r.MessageID == "" {
		return ""
	}
	if r.NormID != "" {
		return r.NormID
	}
	return r.MessageID
}

// HashAddrs returns the AddrHash of a submit from src to dst: the first 16
// bytes of SHA-256 over both addresses. A receipt travels the other way,
// so it matches HashAddrs(receipt destination, receipt source).
func HashAddrs(src, dst []byte) [16]byte {
	h := sha256.New()
	h.Write(src)
	h.Write([]byte{0})
	h.Write(dst)
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// DeliveryState is the delivery outcome a receipt reports (SPEC §4): the
// SMPP message_state values.
type DeliveryState string

// Delivery states. The zero value means no receipt yet.
const (
	DeliveryEnroute       DeliveryState = "enroute"
	DeliveryDelivered     DeliveryState = "delivered"
	DeliveryExpired       DeliveryState = "expired"
	DeliveryDeleted       DeliveryState = "deleted"
	DeliveryUndeliverable DeliveryState = "undeliverable"
	DeliveryAccepted      DeliveryState = "accepted"
	DeliveryUnknown       DeliveryState = "unknown"
	DeliveryRejected      DeliveryState = "rejected"
	DeliverySkipped       DeliveryState = "skipped"
)

// Final reports whether d ends the message's life at the SMSC; enroute,
// accepted and no state at all are intermediate.
func (d DeliveryState) Final() bool {
	switch d {
	case "", DeliveryEnroute, DeliveryAccepted:
		return false
	}
	return true
}

// Clone returns a deep copy.
func (r *Record) Clone() *Record {
	c := *r
	c.History = append([]Event(nil), r.History...)
	return &c
}

// Expired reports whether the record is past Expires at now.
func (r *Record) Expired(now time.Time) bool {
	return expiredAt(r.Expires, now)
}

// expiredAt reports whether an expiry has passed at now: a zero one never
// does, one equal to now has.
func expiredAt(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires)
}

// Store is the durable record store. All methods are safe for concurrent
// use. A method that returns nil error has made its effect durable (synced
// to disk for persistent backends) before returning.
type Store interface {
	// Create inserts rec if no live record exists under rec.Key. Exactly
	// one of any number of concurrent Creates of one key returns
	// created=true. When a live record exists, it is returned (a copy) with
	// created=false and nothing is written. An expired record counts as
	// absent and is replaced. On created=true, existing is nil.
	Create(ctx context.Context, rec *Record) (existing *Record, created bool, err error)

	// Get returns a copy of the live record under k, or ErrNotFound.
	Get(ctx context.Context, k Key) (*Record, error)

	// Update atomically reads the live record under k, calls fn on a copy,
	// and durably stores the result. fn must not block or do I/O; it runs
	// while other writers wait. If fn returns an error, nothing is written
	// and Update returns (the unchanged record, that error). ErrNotFound if
	// there is no live record. fn must not change rec.Key (Update then
	// fails and writes nothing). On success Update returns the stored
	// record.
	Update(ctx context.Context, k Key, fn func(*Record) error) (*Record, error)

	// Replace durably writes rec over old (the same Key) without reading
	// the store: for a caller that owns the record, holding the last
	// version it wrote (old) while no one else changes it. Index entries
	// old had and rec has not are deleted (unless another record has
	// taken them over), those rec gains are written, and the history
	// events rec has beyond old's are appended to the stored history (old
	// and rec as Update's fn would see and leave them: rec's history is
	// old's with events appended, possibly trimmed like MaxHistory; any
	// other history replaces it). A store of one process does not check
	// that old is what is stored: a caller that does not own the record
	// must use Update. A store shared by several instances refuses the
	// write (an error, nothing written) when the stored record is no
	// longer in old's state or of old's owner instance: another instance
	// took it over after its owner's lease ran out. A
	// record written by an older version of the store keeps the history
	// old shows only if written by Update first.
	Replace(ctx context.Context, old, rec *Record) error

	// ByMessageID returns the record that upstream accepted with id, where
	// id is compared with the record's MatchID (its NormID when set).
	ByMessageID(ctx context.Context, upstream, id string) (*Record, error)

	// ByProxyID returns the record of account that was issued proxy
	// message id id (Record.ProxyID).
	ByProxyID(ctx context.Context, account, id string) (*Record, error)

	// UnknownByAddr returns every live record in state Unknown whose
	// Upstream is upstream and whose AddrHash is h (in no particular
	// order; none is not an error). A zero h matches nothing.
	UnknownByAddr(ctx context.Context, upstream string, h [16]byte) ([]*Record, error)

	// Scan calls fn for every live record (in no particular order) until fn
	// returns false. fn must not call the Store.
	Scan(ctx context.Context, fn func(*Record) bool) error

	// ScanState is Scan restricted to the live records in state st. For
	// Sent its cost is proportional to the records in that state, not to
	// all records (start-up recovery looks for them).
	ScanState(ctx context.Context, st SubmitState, fn func(*Record) bool) error

	// Close flushes and closes the store. Later calls return ErrClosed.
	Close() error
}

// HotReader is implemented by stores that can read a record without its
// history, which they keep apart (BadgerStore, MemStore; storetest.Faulty
// passes it on): for decisions on a hot path, which never need History.
type HotReader interface {
	// GetHot is Get without Record.History (nil).
	GetHot(ctx context.Context, k Key) (*Record, error)
}
