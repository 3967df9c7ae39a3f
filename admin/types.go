package admin

import (
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// The JSON API's types, shared by the server and the Client.

// SessionList is the answer of GET /api/v1/sessions.
type SessionList struct {
	// InstanceID is the instance every session listed is bound to (each
	// instance sharing a store lists its own); "" when not known.
	InstanceID string         `json:"instance_id,omitempty"`
	Sessions   []session.Info `json:"sessions"`
}

// Record is a stored record as the API shows it: hashes and ids only, never
// message text.
type Record struct {
	Account string `json:"account"`
	// Key is the client's idempotency key for a key-TLV record; for an
	// untracked record ("u:…") it is the stored key; for a fingerprint
	// record it is the stored key with the fingerprint replaced by its tag
	// ("fp~" + 8 hex digits, then "/ref<n>" or "@<archived>" as stored):
	// show and resolve accept that form.
	Key string `json:"key"`
	// Kind is "tlv", "fingerprint" or "untracked".
	Kind     string `json:"kind"`
	Segment  string `json:"segment,omitempty"`
	State    string `json:"state"`
	Upstream string `json:"upstream,omitempty"`
	Session  string `json:"session,omitempty"`
	Sequence uint32 `json:"sequence,omitempty"`
	// MessageID is the upstream's id, as its submit_sm_resp wrote it.
	MessageID string `json:"message_id,omitempty"`
	// ProxyID is the id the proxy issues to the ESME under message_id:
	// proxy ("" under passthrough); it is reserved when the record is
	// created. ClientMessageID is the id the ESME got in its
	// submit_sm_resp and sees in its receipts: ProxyID when set, else
	// MessageID; only an accepted record has one (the ESME of any other
	// record got an error status and no id).
	ProxyID         string `json:"proxy_id,omitempty"`
	ClientMessageID string `json:"client_message_id,omitempty"`
	// Delivery is what the last receipt said about the message (enroute,
	// delivered, expired, deleted, undeliverable, accepted, unknown,
	// rejected, skipped), kept apart from State; "" before any receipt.
	// DeliveryAt is when the proxy received that receipt.
	Delivery   string    `json:"delivery,omitempty"`
	DeliveryAt time.Time `json:"delivery_at,omitzero"`
	Status     uint32    `json:"status"`
	StatusName string    `json:"status_name"`
	Attempts   int       `json:"attempts,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	// OwnerInstance is the proxy instance that owns the record (Owner up
	// to its last "/"): the one that forwarded it, or, while it is sent,
	// the one waiting for the SMSC's answer.
	OwnerInstance string `json:"owner_instance,omitempty"`
	// FingerprintTag stands for the record's content fingerprint, which
	// is never shown: 8 hex digits of an HMAC under the install's secret
	// (dedup.Engine.Tag). Two records with the same tag were, almost
	// surely, the same message; the message cannot be recovered from it.
	FingerprintTag string    `json:"fingerprint_tag"`
	Created        time.Time `json:"created"`
	Updated        time.Time `json:"updated"`
	Expires        time.Time `json:"expires"`
	History        []Event   `json:"history,omitempty"`
}

// Event is one transition of a record.
type Event struct {
	At         time.Time `json:"at"`
	State      string    `json:"state"`
	Status     uint32    `json:"status,omitempty"`
	StatusName string    `json:"status_name,omitempty"`
	Session    string    `json:"session,omitempty"`
	Sequence   uint32    `json:"sequence,omitempty"`
	MessageID  string    `json:"message_id,omitempty"`
	Note       string    `json:"note,omitempty"`
}

// RecordList is the answer of GET /api/v1/keys and GET /api/v1/keys/show.
type RecordList struct {
	Records []Record `json:"records"`
	// Truncated: the listing stopped at its limit or at the scan cap;
	// there may be more.
	Truncated bool `json:"truncated,omitempty"`
}

// ResolveRequest is the body of POST /api/v1/keys/resolve: exactly one of
// MessageID and NotSent.
type ResolveRequest struct {
	Account   string `json:"account"`
	Key       string `json:"key"`
	Segment   string `json:"segment,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	NotSent   bool   `json:"not_sent,omitempty"`
	// By names the operator, for the record's history.
	By string `json:"by,omitempty"`
}

// UnmatchedList is the answer of GET /api/v1/receipts/unmatched: receipts
// kept because they matched no record (SPEC §4), oldest first per
// upstream. Ids, states and times only: never the receipt text or the
// addresses.
type UnmatchedList struct {
	Receipts []dlr.UnmatchedReceipt `json:"receipts"`
	// Truncated: the listing stopped at its limit; there may be more.
	Truncated bool `json:"truncated,omitempty"`
}

// KickResult is the answer of POST /api/v1/sessions/{id}/kick.
type KickResult struct {
	Kicked string `json:"kicked"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// Stored key prefixes written by the dedup engine.
const (
	prefixTLV         = "k:"
	prefixFingerprint = "fp:"
	prefixUntracked   = "u:"
)

// storedKeys returns the stored keys an operator's KEY may mean: the
// client's key TLV value, and KEY itself when it is already in stored form
// ("k:…", "fp:…", "u:…").
func storedKeys(key string) []string {
	out := []string{prefixTLV + key}
	for _, p := range []string{prefixTLV, prefixFingerprint, prefixUntracked} {
		if strings.HasPrefix(key, p) {
			out = append(out, key)
			break
		}
	}
	return out
}

// displayKey splits a stored key into what an operator reads and its kind.
func displayKey(stored string, t Tagger) (key, kind string) {
	switch {
	case strings.HasPrefix(stored, prefixTLV):
		return strings.TrimPrefix(stored, prefixTLV), "tlv"
	case strings.HasPrefix(stored, prefixFingerprint):
		return dedup.TagKey(stored, t.Tag), "fingerprint"
	case strings.HasPrefix(stored, prefixUntracked):
		return stored, "untracked"
	}
	return stored, "other"
}

// NewRecord converts a stored record for the API, its fingerprint (and
// the fingerprint a fingerprint key embeds) shown by t's tag only; nil t
// shows none.
func NewRecord(r *state.Record, t Tagger) Record {
	if t == nil {
		t = hiddenTags{}
	}
	key, kind := displayKey(r.Key.Key, t)
	out := Record{
		Account: r.Key.Account, Key: key, Kind: kind, Segment: r.Key.Segment,
		State: string(r.State), Upstream: r.Upstream, Session: r.Session, Sequence: r.Sequence,
		MessageID: r.MessageID, ProxyID: r.ProxyID,
		Delivery: string(r.Delivery), DeliveryAt: r.DeliveryAt,
		Status: r.Status, StatusName: smpp.Status(r.Status).String(),
		Attempts: r.Attempts, Owner: r.Owner, OwnerInstance: state.OwnerInstance(r.Owner), FingerprintTag: t.Tag(r.Fingerprint),
		Created: r.Created, Updated: r.Updated, Expires: r.Expires,
	}
	if r.State == state.Accepted {
		out.ClientMessageID = r.ClientMessageID()
	}
	for _, e := range r.History {
		ev := Event{At: e.At, State: string(e.State), Status: e.Status, Session: e.Session, Sequence: e.Sequence, MessageID: e.MessageID, Note: e.Note}
		if e.Status != 0 {
			ev.StatusName = smpp.Status(e.Status).String()
		}
		out.History = append(out.History, ev)
	}
	return out
}
