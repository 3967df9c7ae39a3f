package admin

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// The JSON API's types, shared by the server and the Client.

// SessionList is the answer of GET /api/v1/sessions.
type SessionList struct {
	Sessions []session.Info `json:"sessions"`
}

// Record is a stored record as the API shows it: hashes and ids only, never
// message text.
type Record struct {
	Account string `json:"account"`
	// Key is the client's idempotency key for a key-TLV record; for a
	// fingerprint ("fp:…") or untracked ("u:…") record it is the stored key.
	Key string `json:"key"`
	// Kind is "tlv", "fingerprint" or "untracked".
	Kind        string    `json:"kind"`
	Segment     string    `json:"segment,omitempty"`
	State       string    `json:"state"`
	Upstream    string    `json:"upstream,omitempty"`
	Session     string    `json:"session,omitempty"`
	Sequence    uint32    `json:"sequence,omitempty"`
	MessageID   string    `json:"message_id,omitempty"`
	Status      uint32    `json:"status"`
	StatusName  string    `json:"status_name"`
	Attempts    int       `json:"attempts,omitempty"`
	Owner       string    `json:"owner,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	Expires     time.Time `json:"expires"`
	History     []Event   `json:"history,omitempty"`
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
func displayKey(stored string) (key, kind string) {
	switch {
	case strings.HasPrefix(stored, prefixTLV):
		return strings.TrimPrefix(stored, prefixTLV), "tlv"
	case strings.HasPrefix(stored, prefixFingerprint):
		return stored, "fingerprint"
	case strings.HasPrefix(stored, prefixUntracked):
		return stored, "untracked"
	}
	return stored, "other"
}

// NewRecord converts a stored record for the API.
func NewRecord(r *state.Record) Record {
	key, kind := displayKey(r.Key.Key)
	out := Record{
		Account: r.Key.Account, Key: key, Kind: kind, Segment: r.Key.Segment,
		State: string(r.State), Upstream: r.Upstream, Session: r.Session, Sequence: r.Sequence,
		MessageID: r.MessageID, Status: r.Status, StatusName: smpp.Status(r.Status).String(),
		Attempts: r.Attempts, Owner: r.Owner, Fingerprint: hex.EncodeToString(r.Fingerprint[:]),
		Created: r.Created, Updated: r.Updated, Expires: r.Expires,
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
