package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// sentVersions counts the versions (puts and deletions) of Sent index
// entries Badger itself holds, read past the store.
func sentVersions(t *testing.T, s *BadgerStore) int {
	t.Helper()
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixSent), AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sentKeys returns the keys ScanState(Sent) visits, sorted.
func scanSent(t *testing.T, s *BadgerStore) []string {
	t.Helper()
	var got []string
	if err := s.ScanState(context.Background(), Sent, func(r *Record) bool {
		got = append(got, r.Key.Key)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func sentRecord(key string, now time.Time) *Record {
	return &Record{Key: Key{Account: "acme", Key: key}, State: Sent, Upstream: "smsc",
		Created: now, Updated: now, Expires: now.Add(time.Hour), History: []Event{{At: now, State: Sent}}}
}

// accept writes the outcome of the record under key (accepted).
func accept(t *testing.T, s *BadgerStore, key string, now time.Time) {
	t.Helper()
	old, err := s.Get(context.Background(), Key{Account: "acme", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	r := old.Clone()
	r.State, r.MessageID = Accepted, "m-"+key
	r.History = append(r.History, Event{At: now, State: Accepted})
	if err := s.Replace(context.Background(), old, r); err != nil {
		t.Fatal(err)
	}
}

// A submit settled while the commit log still holds its create puts
// nothing in Badger's index of Sent records, neither the entry nor its
// deletion: the commit log holds both.
func TestASettledSubmitWritesNoSentIndexEntryToBadger(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i := range 50 {
		if _, _, err := s.Create(context.Background(), sentRecord(fmt.Sprint("k", i), now)); err != nil {
			t.Fatal(err)
		}
	}
	if got := scanSent(t, s); len(got) != 50 {
		t.Fatalf("ScanState(Sent) after 50 creates visits %d records, want 50", len(got))
	}
	for i := range 50 {
		accept(t, s, fmt.Sprint("k", i), now)
	}
	if got := scanSent(t, s); len(got) != 0 {
		t.Errorf("ScanState(Sent) after every outcome visits %v, want none", got)
	}
	if n := sentVersions(t, s); n != 0 {
		t.Errorf("Badger holds %d versions of Sent index entries after 50 submits settled, want 0", n)
	}
}

// A record left Sent (its process died with it in flight) is found by
// ScanState after a crash and a reopen even once the commit log segments
// that created it are gone: its index entry went to Badger before they
// were removed.
func TestSentRecordsOutliveTheCommitLogSegmentsThatCreatedThem(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: 64 << 10,
		MemtableSize: 1 << 20, trimSyncAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	var stuck []string
	for i := range 20 {
		k := fmt.Sprintf("stuck-%02d", i)
		stuck = append(stuck, k)
		if _, _, err := s.Create(ctx, sentRecord(k, now)); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
	slices.Sort(first)
	// Submits that settle, until the segments of the stuck creates go.
	for i := 0; ; i++ {
		k := fmt.Sprint("done-", i)
		if _, _, err := s.Create(ctx, sentRecord(k, now)); err != nil {
			t.Fatal(err)
		}
		accept(t, s, k, now)
		if i%500 == 499 {
			if _, err := os.Stat(first[0]); os.IsNotExist(err) {
				break
			}
		}
		if i > 200_000 {
			t.Fatal("the first commit log segment was never removed")
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return sentVersions(t, s) >= len(stuck) },
		"the stuck records' index entries never reached Badger")
	s2 := crashReopen(t, s, dir)
	if got := scanSent(t, s2); !slices.Equal(got, stuck) {
		t.Errorf("ScanState(Sent) after the crash = %v, want the %d stuck records %v", got, len(stuck), stuck)
	}
}

// Records still Sent when the store closes are found after it reopens:
// Close writes the index entries the commit log held to Badger before it
// removes the log.
func TestSentRecordsAreFoundAfterACleanClose(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		if _, _, err := s.Create(context.Background(), sentRecord(k, now)); err != nil {
			t.Fatal(err)
		}
	}
	accept(t, s, "b", now)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "commit-*.log")); len(segs) != 0 {
		t.Fatalf("commit log segments left after Close: %v", segs)
	}
	s2, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := scanSent(t, s2); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("ScanState(Sent) after a clean close and reopen = %v, want [a c]", got)
	}
}

// A deletion of an entry the commit log holds is undone when its batch
// fails (the deletion may not be in the log), is final once its batch is
// durable, and never undoes a later put of the same entry.
func TestSentLogDeletionsFollowTheirBatch(t *testing.T) {
	l := newSentLog()
	k := []byte(prefixSent + "acme/k")
	l.put(&write{key: k}, 1)
	if !l.deleting(k, 2) {
		t.Fatal("an entry put is not held")
	}
	l.settled([]string{string(k)}, 2, false)
	if ws := l.upTo(1); len(ws) != 1 {
		t.Fatalf("after its deletion failed the entry is not promoted with batch 1's (%d writes), want it held", len(ws))
	}
	l.deleting(k, 3)
	l.put(&write{key: k}, 4) // put again before batch 3 is durable
	l.settled([]string{string(k)}, 3, true)
	if ws := l.upTo(4); len(ws) != 1 {
		t.Errorf("a put after a deletion was dropped by that deletion's batch (%d held), want it held", len(ws))
	}
	l.deleting(k, 5)
	if ws := l.upTo(4); len(ws) != 1 {
		t.Errorf("an entry being deleted is not promoted (%d), want it promoted until its deletion is durable", len(ws))
	}
	l.settled([]string{string(k)}, 5, true)
	if ws := l.upTo(^uint64(0)); len(ws) != 0 || l.deleting(k, 6) {
		t.Errorf("after its deletion was durable the entry is still held (%d)", len(ws))
	}
}

// A promotion that must be split over several batches (more entries than
// one Badger transaction takes) loses none of them: an entry is forgotten
// only once the batch that wrote it to Badger is durable.
func TestAPromotionSplitOverBatchesKeepsEveryEntry(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1, MaxBatch: 512, unlimitedBatch: true,
		tune: func(o badger.Options) badger.Options { return o.WithMemTableSize(1 << 20).WithValueThreshold(64 << 10) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	const n = 6000
	for i := range n {
		if _, _, err := s.Create(context.Background(), sentRecord(fmt.Sprint("k", i), now)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.promoteSent(^uint64(0)); err != nil {
		t.Fatalf("promoteSent = %v", err)
	}
	if held, in := len(s.sent.keys()), sentVersions(t, s); held+in < n {
		t.Errorf("after the promotion %d entries are held and %d in Badger, want all %d in one or the other", held, in, n)
	}
	if got := scanSent(t, s); len(got) != n {
		t.Errorf("ScanState(Sent) visits %d records, want %d", len(got), n)
	}
}

// A promotion whose batch fails (the commit log cannot be written) keeps
// its entries, which Close then writes to Badger: after a reopen every
// record still Sent is found.
func TestAFailedPromotionKeepsItsEntriesForClose(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 10 {
		if _, _, err := s.Create(context.Background(), sentRecord(fmt.Sprint("k", i), now)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.clog.f.Close() // the next write to the log fails
	if err := s.promoteSent(^uint64(0)); err == nil {
		t.Fatal("promoteSent with the commit log closed = nil, want its failure")
	}
	_ = s.Close()
	s2, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := scanSent(t, s2); len(got) != 10 {
		t.Errorf("after a failed promotion, a close and a reopen ScanState(Sent) visits %d records, want 10", len(got))
	}
}

// An entry put again (its record's TTL grew) in a batch that may fail
// keeps the batch of its first put, the one known durable: it is promoted
// with that batch's segment.
func TestAnEntryPutAgainKeepsTheBatchOfItsFirstPut(t *testing.T) {
	l := newSentLog()
	k := []byte(prefixSent + "acme/k")
	l.put(&write{key: k}, 5)
	l.put(&write{key: k}, 6)
	if ws := l.upTo(5); len(ws) != 1 {
		t.Errorf("an entry put in batch 5 and again in 6 is not promoted with batch 5's segment")
	}
}
