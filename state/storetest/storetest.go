// Package storetest is the conformance suite every state.Store backend
// must pass (the pattern of hashicorp/raft's store tests): a backend's own
// test calls Run with a function that opens a fresh, empty store. It also
// holds the tests' fault injection: Faulty wraps a store whose writes a
// test can make fail.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// Opener opens a fresh, empty store whose clock is now. Run closes it at
// the end of each test (a second Close must be harmless).
type Opener func(t *testing.T, now func() time.Time) state.Store

// Run runs the conformance suite against the backend open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s state.Store, c *Clock)
	}{
		{"CreateGetRoundTrip", testRoundTrip},
		{"CreateExistingWritesNothing", testCreateExisting},
		{"CreateRaceOneWinner", testCreateRace},
		{"KeysAreExact", testKeysAreExact},
		{"StoreKeepsNoAliases", testNoAliases},
		{"UpdateReadModifyWrite", testUpdateConcurrent},
		{"UpdateCompareAndSwap", testUpdateCAS},
		{"UpdateFnErrorWritesNothing", testUpdateFnError},
		{"UpdateMissing", testUpdateMissing},
		{"UpdateCannotChangeKey", testUpdateKeyChange},
		{"Expiry", testExpiry},
		{"UpdateExtendsExpiry", testExtendExpiry},
		{"ByMessageID", testByMessageID},
		{"RecordKeepsItsLastJournal", testLastJournal},
		{"IndexTakenOver", testIndexTakenOver},
		{"ByMessageIDUsesNormID", testNormID},
		{"ByProxyID", testByProxyID},
		{"UnknownByAddr", testUnknownByAddr},
		{"QueueOrder", testQueueOrder},
		{"QueueDedup", testQueueDedup},
		{"QueueAck", testQueueAck},
		{"QueueAckAll", testQueueAckAll},
		{"QueueExpiry", testQueueExpiry},
		{"QueuesAreExact", testQueuesAreExact},
		{"QueueConcurrentEnqueue", testQueueConcurrent},
		{"QueueFailWrites", testQueueFailWrites},
		{"QueueClosed", testQueueClosed},
		{"EnqueueAppendWritesBoth", testEnqueueAppendWritesBoth},
		{"EnqueueAppendDuplicateChangesNothing", testEnqueueAppendDuplicateChangesNothing},
		{"EnqueueAppendLeavesARenewedRecordAlone", testEnqueueAppendLeavesARenewedRecordAlone},
		{"EnqueueAppendConcurrent", testEnqueueAppendConcurrent},
		{"AppendHotAppendsAfterTheStoredHistory", testAppendHotAppendsAfterTheStoredHistory},
		{"ByMessageIDHot", testByMessageIDHot},
		{"Scan", testScan},
		{"ReplaceOwnedWrite", testReplaceOwnedWrite},
		{"ReplaceIndexRemoval", testReplaceIndexRemoval},
		{"ReplaceHistoryAppendAndCap", testReplaceHistory},
		{"HistoryCap", testHistoryCap},
		{"ScanState", testScanState},
		{"CountStatesAgreesWithScan", testCountStates},
		{"SubmitsConcurrent", testSubmitsConcurrent},
		{"CanceledContext", testCanceled},
		{"FailWrites", testFailWrites},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC))
			s := open(t, c.Now)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s, c)
		})
	}
}

// Clock is a manual clock for tests (the one of internal/testkit).
type Clock = testkit.Clock

// NewClock returns a Clock standing at t.
func NewClock(t time.Time) *Clock { return testkit.NewClock(t) }

var bg = context.Background()

// newRecord returns a fresh Sent record under k, owned by owner, expiring
// in an hour.
func newRecord(c *Clock, k state.Key, owner string) *state.Record {
	now := c.Now()
	return &state.Record{
		Key:         k,
		Fingerprint: sha256.Sum256([]byte(k.Account + "\x00" + k.Key + "\x00" + k.Segment)),
		State:       state.Sent,
		Owner:       owner,
		Created:     now,
		Updated:     now,
		Expires:     now.Add(time.Hour),
	}
}

// fullRecord has every field set, History included.
func fullRecord(c *Clock) *state.Record {
	now := c.Now()
	r := newRecord(c, state.Key{Account: "acme", Key: "otp-4711", Segment: "2/3"}, "owner-1")
	r.State = state.Accepted
	r.Upstream = "smsc-a"
	r.Session = "smsc-a/2"
	r.Sequence = 0xfffffffe
	r.MessageID = "0badc0de"
	r.NormID = "195936478"
	r.ProxyID = "p-0001"
	r.AddrHash = state.HashAddrs([]byte("SHOP"), []byte("447700900123"))
	r.Delivery = state.DeliveryDelivered
	r.DeliveryAt = now.Add(2 * time.Second)
	r.Status = 0x58
	r.Attempts = 2
	r.Updated = now.Add(1500 * time.Millisecond)
	r.History = []state.Event{
		{At: now, State: state.Sent, Session: "smsc-a/1", Sequence: 7, Note: "forwarded"},
		{At: now.Add(time.Second), State: state.Retryable, Status: 0x58, Session: "smsc-a/1", Sequence: 7, Note: "throttled"},
		{At: now.Add(1500 * time.Millisecond), State: state.Accepted, Session: "smsc-a/2", Sequence: 0xfffffffe, MessageID: "0badc0de"},
	}
	return r
}

// normal returns a copy of r comparable with reflect.DeepEqual across
// backends: times in UTC without monotonic reading, empty History as nil.
func normal(r *state.Record) *state.Record {
	if r == nil {
		return nil
	}
	c := r.Clone()
	c.Created, c.Updated, c.Expires, c.DeliveryAt = c.Created.UTC(), c.Updated.UTC(), c.Expires.UTC(), c.DeliveryAt.UTC()
	if len(c.History) == 0 {
		c.History = nil
	}
	for i := range c.History {
		c.History[i].At = c.History[i].At.UTC()
	}
	return c
}

func same(a, b *state.Record) bool { return reflect.DeepEqual(normal(a), normal(b)) }

// mustCreate creates rec and fails the test unless it was created.
func mustCreate(t *testing.T, s state.Store, rec *state.Record) {
	t.Helper()
	existing, created, err := s.Create(bg, rec)
	if err != nil || !created || existing != nil {
		t.Fatalf("Create(%v) = %v, %v, %v; want nil, true, nil", rec.Key, existing, created, err)
	}
}

// wantGet checks that Get(k) returns want (nil: ErrNotFound).
func wantGet(t *testing.T, s state.Store, k state.Key, want *state.Record) {
	t.Helper()
	got, err := s.Get(bg, k)
	switch {
	case want == nil && !errors.Is(err, state.ErrNotFound):
		t.Errorf("Get(%v) = %+v, %v; want ErrNotFound", k, got, err)
	case want != nil && (err != nil || !same(got, want)):
		t.Errorf("Get(%v) = %+v, %v;\nwant %+v", k, got, err, want)
	}
}

// wantJournal checks that Get(k) returns a record journaled on upstream
// up, session sess with sequence number seq.
func wantJournal(t *testing.T, s state.Store, k state.Key, up, sess string, seq uint32) {
	t.Helper()
	got, err := s.Get(bg, k)
	if err != nil || got.Upstream != up || got.Session != sess || got.Sequence != seq {
		t.Errorf("Get(%v) = %+v, %v; want journaled on %q session %q sequence %d", k, got, err, up, sess, seq)
	}
}

func mustUpdate(t *testing.T, s state.Store, k state.Key, fn func(*state.Record)) *state.Record {
	t.Helper()
	got, err := s.Update(bg, k, func(r *state.Record) error { fn(r); return nil })
	if err != nil {
		t.Fatalf("Update(%v) = %v, %v; want nil error", k, got, err)
	}
	return got
}
