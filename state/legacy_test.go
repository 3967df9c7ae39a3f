package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A store written by an older version (records of codec version 3 with
// the history inline, no index of Sent records) opens: its Sent records
// are found by ScanState, Get returns them whole, and the first Update
// moves the history into the event log without losing an event.
func TestBadgerReadsRecordsOfOlderVersions(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	mk := func(key string, st SubmitState) *Record {
		return &Record{Key: Key{Account: "acme", Key: key}, State: st, Owner: "o", Upstream: "smsc", Session: "smsc/1", Sequence: 1,
			Created: now, Updated: now, Expires: now.Add(time.Hour), FingerprintVersion: FingerprintHMAC,
			History: []Event{{At: now, State: Sent, Note: "created"}, {At: now.Add(time.Second), State: st, Note: "then"}}}
	}
	sent, done := mk("sent", Sent), mk("done", Accepted)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := writeThenOpen(t, db, dir, func(txn *badger.Txn) error {
		for _, r := range []*Record{sent, done} {
			if err := txn.Set(recordKey(r.Key), encodeRecordVersion(nil, r, recordVersion3)); err != nil {
				return err
			}
		}
		return txn.Set(legacyJournalKey("smsc/1", 1), recordKey(sent.Key))
	})
	defer s.Close()
	ctx := context.Background()
	var found []string
	if err := s.ScanState(ctx, Sent, func(r *Record) bool { found = append(found, r.Key.Key); return true }); err != nil || !slices.Equal(found, []string{"sent"}) {
		t.Errorf("ScanState(Sent) on an older store = %v, %v; want [sent]", found, err)
	}
	if got, err := s.Get(ctx, sent.Key); err != nil || !reflect.DeepEqual(got, sent) {
		t.Errorf("Get(version 3 record) = %+v, %v; want %+v", got, err, sent)
	}
	got, err := s.Update(ctx, sent.Key, func(r *Record) error {
		r.State = Accepted
		r.History = append(r.History, Event{At: now.Add(2 * time.Second), State: Accepted, Note: "accepted"})
		return nil
	})
	if err != nil || len(got.History) != 3 {
		t.Fatalf("Update(version 3 record) = %+v, %v; want 3 events", got, err)
	}
	if again, err := s.Get(ctx, sent.Key); err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("Get after Update = %+v, %v; want %+v", again, err, got)
	}
	found = nil
	if err := s.ScanState(ctx, Sent, func(r *Record) bool { found = append(found, r.Key.Key); return true }); err != nil || len(found) != 0 {
		t.Errorf("ScanState(Sent) after the update = %v, %v; want nothing", found, err)
	}
}

// legacyJournalKey is the key of the journal index entry that earlier
// versions wrote for a record journaled on session with seq.
func legacyJournalKey(session string, seq uint32) []byte {
	b := append([]byte("j/"), appendEscaped(nil, session)...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, seq)
}

// A store of a version that wrote the journal index works on: its record
// is updated (journal, TTL and state changing) and read back, a new
// record journaled on the same session and sequence is created, and no
// journal index entry is written any more (the old one is left to its TTL).
func TestBadgerIgnoresTheOldJournalIndex(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	old := &Record{Key: Key{Account: "acme", Key: "old"}, State: Sent, Owner: "o", Upstream: "smsc", Session: "smsc/1", Sequence: 1,
		ProxyID: "p-old", Created: now, Updated: now, Expires: now.Add(time.Hour), FingerprintVersion: FingerprintHMAC,
		History: []Event{{At: now, State: Sent, Session: "smsc/1", Sequence: 1, Note: "created"}}}
	jk := legacyJournalKey("smsc/1", 1)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := writeThenOpen(t, db, dir, func(txn *badger.Txn) error {
		ws, _ := plan(recordKey(old.Key), nil, 0, old, true, clock{now: now, wall: time.Now()})
		for _, w := range ws {
			if err := txn.SetEntry(&badger.Entry{Key: w.key, Value: w.val, ExpiresAt: w.expiresAt}); err != nil {
				return err
			}
		}
		return txn.SetEntry(&badger.Entry{Key: jk, Value: recordKey(old.Key), ExpiresAt: ws[0].expiresAt})
	})
	resent, err := s.Update(ctx, old.Key, func(r *Record) error {
		r.Session, r.Sequence, r.Expires = "smsc/2", 5, r.Expires.Add(time.Hour)
		r.History = append(r.History, Event{At: now, State: Sent, Session: "smsc/2", Sequence: 5, Note: "resent"})
		return nil
	})
	if err != nil {
		t.Fatalf("Update of a record with an old journal entry = %v", err)
	}
	out := resent.Clone()
	out.State, out.MessageID = Accepted, "m-1"
	out.History = append(out.History, Event{At: now, State: Accepted, MessageID: "m-1"})
	if err := s.Replace(ctx, resent, out); err != nil {
		t.Fatalf("Replace = %v", err)
	}
	fresh := old.Clone()
	fresh.Key.Key = "fresh"
	fresh.ProxyID = "p-fresh"
	if _, created, err := s.Create(ctx, fresh.Clone()); err != nil || !created {
		t.Fatalf("Create of a record journaled where the old entry points = %v, %v; want created", created, err)
	}
	if got, err := s.Get(ctx, old.Key); err != nil || !reflect.DeepEqual(got, normalisedFull(out)) {
		t.Errorf("Get(old) = %+v, %v; want %+v", got, err, out)
	}
	if got, err := s.Get(ctx, fresh.Key); err != nil || !reflect.DeepEqual(got, normalisedFull(fresh)) {
		t.Errorf("Get(fresh) = %+v, %v; want %+v", got, err, fresh)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var journal [][]byte
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("j/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			journal = append(journal, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(journal) != 1 || !bytes.Equal(journal[0], jk) {
		t.Errorf("journal index keys after the upgrade = %q; want only the old %q (none written since)", journal, jk)
	}
}

// Writes reported done survive a restart: records, their history, the
// indexes and the index of Sent records.
func TestBadgerReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Now().UTC()
	s, err := OpenBadger(BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(key string) *Record {
		return &Record{Key: Key{Account: "acme", Key: key}, State: Sent, Owner: "o", Upstream: "smsc", Session: "smsc/1", Sequence: uint32(len(key)),
			ProxyID: "p-" + key, Created: now, Updated: now, Expires: now.Add(time.Hour),
			History: []Event{{At: now, State: Sent, Note: "created"}}}
	}
	a, b := rec("a"), rec("bb")
	for _, r := range []*Record{a, b} {
		if _, created, err := s.Create(ctx, r); err != nil || !created {
			t.Fatalf("Create(%v) = %v, %v", r.Key, created, err)
		}
	}
	out := a.Clone()
	out.State, out.MessageID = Accepted, "m-a"
	out.History = append(out.History, Event{At: now, State: Accepted, MessageID: "m-a"})
	if err := s.Replace(ctx, a, out); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBadger(BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.ByMessageID(ctx, "smsc", "m-a"); err != nil || !reflect.DeepEqual(got, normalisedFull(out)) {
		t.Errorf("ByMessageID after reopen = %+v, %v; want %+v", got, err, out)
	}
	if got, err := s.ByProxyID(ctx, "acme", "p-bb"); err != nil || !reflect.DeepEqual(got, normalisedFull(b)) {
		t.Errorf("ByProxyID after reopen = %+v, %v; want %+v", got, err, b)
	}
	var sent []string
	if err := s.ScanState(ctx, Sent, func(r *Record) bool { sent = append(sent, r.Key.Key); return true }); err != nil || !slices.Equal(sent, []string{"bb"}) {
		t.Errorf("ScanState(Sent) after reopen = %v, %v; want [bb]", sent, err)
	}
}

func normalisedFull(r *Record) *Record {
	c := normalised(r)
	c.History = normalisedEvents(r.History)
	return c
}

func TestHistoryDelta(t *testing.T) {
	ev := func(n string) Event { return Event{Note: n} }
	h := func(ns ...string) []Event {
		var out []Event
		for _, n := range ns {
			out = append(out, ev(n))
		}
		return out
	}
	tests := []struct {
		old, next []Event
		added     []Event
		rewrite   bool
	}{
		{nil, h("a"), h("a"), false},
		{h("a"), h("a"), nil, false},
		{h("a"), h("a", "b"), h("b"), false},
		{h("a", "b", "c"), h("a", "c", "d"), h("d"), false}, // trimmed
		{h("a", "b"), h("a", "b", "b"), h("b"), false},      // a repeated event
		{h("a", "b"), h("x"), nil, true},
		{h("a", "b"), nil, nil, true},
		{h("a", "b", "c"), h("a", "b", "x", "d"), nil, true},
	}
	for _, tc := range tests {
		added, rewrite := historyDelta(tc.old, tc.next)
		if rewrite != tc.rewrite || !reflect.DeepEqual(added, tc.added) && len(added)+len(tc.added) > 0 {
			t.Errorf("historyDelta(%v, %v) = %v, %v; want %v, %v", tc.old, tc.next, added, rewrite, tc.added, tc.rewrite)
		}
	}
}

// writeThenOpen writes with fn straight into db (a store as an older
// version left it), closes it and opens dir as a store.
func writeThenOpen(t *testing.T, db *badger.DB, dir string, fn func(*badger.Txn) error) *BadgerStore {
	t.Helper()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenBadger(BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
