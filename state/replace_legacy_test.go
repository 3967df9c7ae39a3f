package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Replace of a record of codec version 3 (history inline) by what Get
// returned plus one event keeps every event (Replace trusts old's history
// as the stored one; a stored version 3 record has no log).
func TestReplaceOfAVersion3RecordKeepsItsHistory(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	r := &Record{Key: Key{Account: "acme", Key: "v3"}, State: Accepted, Created: now, Updated: now, Expires: now.Add(time.Hour)}
	for i := range 6 {
		r.History = append(r.History, Event{At: now.Add(time.Duration(i) * time.Second), State: Accepted, Note: fmt.Sprint("event ", i)})
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := writeThenOpen(t, db, dir, func(txn *badger.Txn) error {
		return txn.Set(recordKey(r.Key), encodeRecordVersion(nil, r, recordVersion3))
	})
	defer s.Close()
	ctx := context.Background()
	old, err := s.Get(ctx, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	next := old.Clone()
	next.History = append(next.History, Event{At: now.Add(time.Minute), State: Accepted, Note: "event 6"})
	if err := s.Replace(ctx, old, next); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.Key)
	if err != nil || len(got.History) != 7 {
		t.Errorf("Get after Replace = %q, %v; want 7 events", eventNotes(got.History), err)
	}
}
