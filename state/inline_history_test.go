package state

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// logged returns the sequence numbers of the history log entries of the
// record under k, as the store holds them.
func logged(t *testing.T, s *BadgerStore, k Key) []uint32 {
	t.Helper()
	pre := histPrefix(recordKey(k))
	var qs []uint32
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pre})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			key := it.Item().Key()
			b := key[len(pre):]
			qs = append(qs, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

func eventNotes(h []Event) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = e.Note
	}
	return out
}

func wantNotes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("event ", i)
	}
	return out
}

// A submit's usual history (up to maxInline events: forwarded, answered,
// a receipt or two) is kept with its record, whichever write added the
// events (Create, Replace, AppendHot, Update), so none of those writes
// needs a key of the history log; the event after it moves the history
// to the log, where it is read back whole, also after a reopen.
func TestShortHistoryIsKeptWithTheRecordThenMovesToTheLog(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	k := Key{Account: "acme", Key: "k1"}
	ev := func(i int) Event {
		return Event{At: now.Add(time.Duration(i) * time.Second), State: Accepted, Note: fmt.Sprint("event ", i)}
	}
	rec := &Record{Key: k, State: Sent, Created: now, Updated: now, Expires: now.Add(time.Hour), History: []Event{ev(0)}}
	if _, created, err := s.Create(ctx, rec); err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	next := rec.Clone()
	next.State, next.Upstream, next.MessageID = Accepted, "smsc", "m1"
	next.History = append(next.History, ev(1))
	if err := s.Replace(ctx, rec, next); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendHot(ctx, k, func(r *Record) error { r.History = append(r.History, ev(2)); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, k, func(r *Record) error { r.History = append(r.History, ev(3)); return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, k)
	if err != nil || !slices.Equal(eventNotes(got.History), wantNotes(maxInline)) {
		t.Fatalf("Get after %d events = %q, %v; want %q", maxInline, eventNotes(got.History), err, wantNotes(maxInline))
	}
	if qs := logged(t, s, k); len(qs) != 0 {
		t.Errorf("history log entries %v for a history of %d events; want none (kept with the record)", qs, maxInline)
	}

	if err := s.AppendHot(ctx, k, func(r *Record) error { r.History = append(r.History, ev(4)); return nil }); err != nil {
		t.Fatal(err)
	}
	if qs := logged(t, s, k); !slices.Equal(qs, []uint32{1, 2, 3, 4}) {
		t.Errorf("history log entries %v after event %d; want 1 to 4 (the first event stays with the record)", qs, maxInline+1)
	}
	if _, err := s.Update(ctx, k, func(r *Record) error { r.History = append(r.History, ev(5)); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Get(ctx, k); err != nil || !slices.Equal(eventNotes(got.History), wantNotes(6)) {
		t.Errorf("Get after 6 events = %q, %v; want %q", eventNotes(got.History), err, wantNotes(6))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenBadger(BadgerOptions{Path: dir}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err = s.Get(ctx, k); err != nil || !slices.Equal(eventNotes(got.History), wantNotes(6)) {
		t.Errorf("Get after reopening = %q, %v; want %q", eventNotes(got.History), err, wantNotes(6))
	}
}

// A record of version 4 (its first event with it, the others in the
// log) reads whole; appending to it without reading the log (AppendHot)
// goes on in the log, and a write that holds its whole history stores
// it in the current form: kept with the record while short (the log
// entries left behind are not read), in the log when longer.
func TestRecordsOfVersion4KeepTheirHistory(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	ev := func(i int) Event {
		return Event{At: now.Add(time.Duration(i) * time.Second), State: Accepted, Note: fmt.Sprint("event ", i)}
	}
	mk := func(key string, events int) *Record {
		r := &Record{Key: Key{Account: "acme", Key: key}, State: Accepted, Upstream: "smsc", MessageID: "m-" + key,
			Created: now, Updated: now, Expires: now.Add(time.Hour), FingerprintVersion: FingerprintHMAC}
		for i := range events {
			r.History = append(r.History, ev(i))
		}
		return r
	}
	short, long := mk("short", 2), mk("long", 3)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := writeThenOpen(t, db, dir, func(txn *badger.Txn) error {
		for _, r := range []*Record{short, long} {
			rk := recordKey(r.Key)
			if err := txn.Set(rk, encodeHotVersion(nil, r, uint32(len(r.History)), recordVersion4)); err != nil {
				return err
			}
			for q := 1; q < len(r.History); q++ {
				if err := txn.Set(histKey(rk, uint32(q)), encodeEvent(nil, &r.History[q])); err != nil {
					return err
				}
			}
		}
		return nil
	})
	defer s.Close()
	ctx := context.Background()
	for _, r := range []*Record{short, long} {
		if got, err := s.Get(ctx, r.Key); err != nil || !slices.Equal(eventNotes(got.History), eventNotes(r.History)) {
			t.Errorf("Get(version 4 record %s) = %q, %v; want %q", r.Key.Key, eventNotes(got.History), err, eventNotes(r.History))
		}
	}

	// AppendHot on the long one sees the first event only and logs event 3.
	var seen int
	if err := s.AppendHot(ctx, long.Key, func(r *Record) error {
		seen = len(r.History)
		r.History = append(r.History, ev(3))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 1 {
		t.Errorf("AppendHot on a version 4 record saw %d events; want its first", seen)
	}
	if qs := logged(t, s, long.Key); !slices.Equal(qs, []uint32{1, 2, 3}) {
		t.Errorf("log of the version 4 record after AppendHot: %v; want 1 to 3", qs)
	}
	// Update reads it whole: 5 events, in the log.
	if _, err := s.Update(ctx, long.Key, func(r *Record) error { r.History = append(r.History, ev(4)); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, long.Key); err != nil || !slices.Equal(eventNotes(got.History), wantNotes(5)) {
		t.Errorf("Get(long) after AppendHot and Update = %q, %v; want %q", eventNotes(got.History), err, wantNotes(5))
	}

	// Update of the short one: 3 events, kept with the record from now on.
	if _, err := s.Update(ctx, short.Key, func(r *Record) error { r.History = append(r.History, ev(2)); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, short.Key); err != nil || !slices.Equal(eventNotes(got.History), wantNotes(3)) {
		t.Errorf("Get(short) after Update = %q, %v; want %q", eventNotes(got.History), err, wantNotes(3))
	}
	// Its old log entry 1 is left behind (not read): replacing the history
	// by a shorter one shows only the new events.
	if _, err := s.Update(ctx, short.Key, func(r *Record) error {
		r.History = []Event{{At: now, State: Accepted, Note: "replaced"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, short.Key); err != nil || !slices.Equal(eventNotes(got.History), []string{"replaced"}) {
		t.Errorf("Get(short) after its history was replaced = %q, %v; want [replaced]", eventNotes(got.History), err)
	}
}
