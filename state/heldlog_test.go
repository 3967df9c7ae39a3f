package state

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// versions counts the versions (puts and deletions) of the keys under
// prefix Badger itself holds, read past the store.
func versions(t *testing.T, s *BadgerStore, prefix string) int { return badgerKeys(t, s, prefix, true) }

// liveKeys counts the keys under prefix Badger itself holds now (their
// latest version a put), read past the store.
func liveKeys(t *testing.T, s *BadgerStore, prefix string) int {
	return badgerKeys(t, s, prefix, false)
}

func badgerKeys(t *testing.T, s *BadgerStore, prefix string, allVersions bool) int {
	t.Helper()
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), AllVersions: allVersions})
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

// sentVersions counts the versions of Sent index entries Badger holds.
func sentVersions(t *testing.T, s *BadgerStore) int { return versions(t, s, prefixSent) }

// queueVersions counts the versions of queue entries Badger holds.
func queueVersions(t *testing.T, s *BadgerStore) int { return versions(t, s, prefixQueue) }

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

// createSent creates the records sentRecord makes of keys in s.
func createSent(t *testing.T, s *BadgerStore, now time.Time, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, _, err := s.Create(context.Background(), sentRecord(k, now)); err != nil {
			t.Fatal(err)
		}
	}
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

// openAt opens the store in dir (no value-log GC).
func openAt(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openSmallSegments opens a store in dir whose commit log segments are
// small and trimmed soon, so that a test sees them go.
func openSmallSegments(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: 64 << 10,
		MemtableSize: 1 << 20, trimSyncAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// untilFirstSegmentGone runs step(i), i = 0, 1, ..., until the oldest
// commit log segment in dir now is removed.
func untilFirstSegmentGone(t *testing.T, dir string, step func(i int)) {
	t.Helper()
	first, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
	slices.Sort(first)
	for i := 0; ; i++ {
		step(i)
		if i%500 == 499 {
			if _, err := os.Stat(first[0]); os.IsNotExist(err) {
				return
			}
		}
		if i > 200_000 {
			t.Fatal("the first commit log segment was never removed")
		}
	}
}

// A record left Sent (its process died with it in flight) is found by
// ScanState after a crash and a reopen even once the commit log segments
// that created it are gone: its index entry went to Badger before they
// were removed.
func TestSentRecordsOutliveTheCommitLogSegmentsThatCreatedThem(t *testing.T) {
	dir := t.TempDir()
	s := openSmallSegments(t, dir)
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
	// Submits that settle, until the segments of the stuck creates go.
	untilFirstSegmentGone(t, dir, func(i int) {
		k := fmt.Sprint("done-", i)
		if _, _, err := s.Create(ctx, sentRecord(k, now)); err != nil {
			t.Fatal(err)
		}
		accept(t, s, k, now)
	})
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
	s := openAt(t, dir)
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
	s2 := openAt(t, dir)
	defer s2.Close()
	if got := scanSent(t, s2); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("ScanState(Sent) after a clean close and reopen = %v, want [a c]", got)
	}
}

// A deletion of an entry the commit log holds is undone when its batch
// fails (the deletion may not be in the log), is final once its batch is
// durable, and never undoes a later put of the same entry. An entry being
// deleted is not promoted (the promotion would follow the deletion into
// Badger and bring it back) but counts as pending, so that its segment
// stays until the deletion is settled.
func TestHeldLogDeletionsFollowTheirBatch(t *testing.T) {
	l := newHeldLog()
	k := []byte(prefixSent + "acme/k")
	l.put(&write{key: k}, 1)
	l.settled([]string{string(k)}, 1, true)
	if held, toBadger := l.deleting(k, 2); !held || toBadger {
		t.Fatalf("deleting an entry put = held %v, to Badger %v; want held, kept from Badger", held, toBadger)
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
	if ws, n := l.upTo(4), l.pending(4); len(ws) != 0 || n != 1 {
		t.Errorf("an entry being deleted: %d promoted, %d pending; want none promoted and it pending", len(ws), n)
	}
	if l.promoted(&write{key: k}, 6) {
		t.Error("a promotion after a deletion in flight is written, want it skipped")
	}
	l.settled([]string{string(k)}, 5, true)
	if held, _ := l.deleting(k, 7); len(l.upTo(^uint64(0))) != 0 || l.pending(^uint64(0)) != 0 || held {
		t.Errorf("after its deletion was durable the entry is still held")
	}
}

// A held entry whose promotion is in flight is in Badger once that batch
// is applied: its deletion then goes to Badger too (after the promotion),
// or Badger would keep it.
func TestADeletionDuringAPromotionGoesToBadger(t *testing.T) {
	l := newHeldLog()
	k := entryKey("shop", 1)
	l.put(&write{key: k, val: []byte("v")}, 1)
	l.settled([]string{string(k)}, 1, true)
	if !l.promoted(&write{key: k}, 2) {
		t.Fatal("a held entry is not promoted")
	}
	if held, toBadger := l.deleting(k, 3); !held || !toBadger {
		t.Errorf("deleting an entry being promoted = held %v, to Badger %v; want both", held, toBadger)
	}
	l.settled([]string{string(k)}, 2, true)
	if l.pending(^uint64(0)) != 0 {
		t.Error("an entry promoted is still held once its promotion is durable")
	}
}

// A queue entry is listed only once the batch that put it is durable, and
// is gone for good when that batch fails.
func TestAHeldQueueEntryIsListedOnceDurable(t *testing.T) {
	l := newHeldLog()
	prefix := queuePrefix("shop")
	k1, k2 := entryKey("shop", 1), entryKey("shop", 2)
	l.put(&write{key: k1, val: []byte("one")}, 7)
	l.put(&write{key: k2, val: []byte("two")}, 8)
	if got := l.list(prefix, 0, 10, time.Now()); len(got.live) != 0 || len(got.seqs) != 2 {
		t.Fatalf("before their batches settle: %d listed, %d held; want 0 listed, 2 held", len(got.live), len(got.seqs))
	}
	l.settled([]string{string(k1)}, 7, true)
	l.settled([]string{string(k2)}, 8, false)
	got := l.list(prefix, 0, 10, time.Now())
	if len(got.live) != 1 || string(got.live[0]) != "one" || !slices.Equal(got.seqs, []uint64{1}) {
		t.Errorf("after batch 7 settled and 8 failed: listed %q, held %v; want [one], [1]", got.live, got.seqs)
	}
	if n := l.pending(^uint64(0)); n != 1 {
		t.Errorf("%d entries held, want 1 (the failed put forgotten)", n)
	}
}

// The listing of held entries stops at the limit and names the sequence
// number it stopped at, so that Badger's listing need not go past it;
// forgotten entries are dropped from their queue as they accumulate.
func TestHeldQueueListingIsBoundedAndForgetsWhatWasAcknowledged(t *testing.T) {
	l := newHeldLog()
	prefix := queuePrefix("shop")
	var keys []string
	for seq := uint64(1); seq <= 300; seq++ {
		k := entryKey("shop", seq)
		keys = append(keys, string(k))
		l.put(&write{key: k, val: []byte(fmt.Sprint(seq))}, seq)
	}
	l.settled(keys, 300, true) // (no entry was put by batch 300 but the last)
	for i, k := range keys {
		l.settled([]string{k}, uint64(i+1), true)
	}
	got := l.list(prefix, 100, 5, time.Now())
	if len(got.live) != 5 || string(got.live[0]) != "101" || got.bound != 105 {
		t.Fatalf("list after 100, limit 5 = %q, bound %d; want 101..105, bound 105", got.live, got.bound)
	}
	for i, k := range keys[:250] {
		l.deleting([]byte(k), uint64(1000+i))
		l.settled([]string{k}, uint64(1000+i), true)
	}
	if q := l.queues[string(prefix)]; q == nil || len(q.es) >= 300 {
		t.Errorf("after 250 of 300 entries were deleted the queue still keeps every entry")
	}
	got = l.list(prefix, 0, 100, time.Now())
	if len(got.live) != 50 || string(got.live[0]) != "251" || got.bound != 0 {
		t.Errorf("list from the start after 250 deletions: %q, bound %d; want 50 from 251, no bound", got.live, got.bound)
	}
	for _, k := range keys[250:] {
		l.deleting([]byte(k), 2000)
	}
	l.settled(keys[250:], 2000, true)
	if len(l.queues) != 0 || len(l.m) != 0 {
		t.Errorf("after every entry was deleted the log keeps %d queues and %d entries, want none", len(l.queues), len(l.m))
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
	if err := s.promoteHeld(^uint64(0)); err != nil {
		t.Fatalf("promoteHeld = %v", err)
	}
	if held, in := len(s.held.sentKeys()), sentVersions(t, s); held+in < n {
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
	if err := s.promoteHeld(^uint64(0)); err == nil {
		t.Fatal("promoteHeld with the commit log closed = nil, want its failure")
	}
	_ = s.Close()
	s2 := openAt(t, dir)
	defer s2.Close()
	if got := scanSent(t, s2); len(got) != 10 {
		t.Errorf("after a failed promotion, a close and a reopen ScanState(Sent) visits %d records, want 10", len(got))
	}
}

// An entry put again (its record's TTL grew) in a batch that may fail
// keeps the batch of its first put, the one known durable: it is promoted
// with that batch's segment.
func TestAnEntryPutAgainKeepsTheBatchOfItsFirstPut(t *testing.T) {
	l := newHeldLog()
	k := []byte(prefixSent + "acme/k")
	l.put(&write{key: k}, 5)
	l.put(&write{key: k}, 6)
	if ws := l.upTo(5); len(ws) != 1 {
		t.Errorf("an entry put in batch 5 and again in 6 is not promoted with batch 5's segment")
	}
}

// enqueued counts enqueueN's receipts (each its own dedup key).
var enqueued atomic.Int64

// enqueueN enqueues n receipts into queue and returns their sequence
// numbers.
func enqueueN(t *testing.T, s *BadgerStore, queue string, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for range n {
		i := enqueued.Add(1)
		seq, _, err := s.Enqueue(context.Background(), &QueueEntry{Queue: queue, Kind: "receipt", DedupKey: fmt.Sprint(queue, i),
			MessageID: fmt.Sprint("m", i), Command: 5, Body: []byte(fmt.Sprint("id:m", i, " stat:DELIVRD")), Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// listSeqs returns the sequence numbers List gives.
func listSeqs(t *testing.T, s *BadgerStore, queue string, after uint64, limit int) []uint64 {
	t.Helper()
	es, err := s.List(context.Background(), queue, after, limit)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// A receipt delivered and acknowledged while the commit log still holds
// its enqueue puts nothing in Badger's queue, neither the entry nor its
// deletion: the commit log holds both.
func TestAReceiptAcknowledgedSoonWritesNoQueueEntryToBadger(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seqs := enqueueN(t, s, "shop", 40)
	if got := listSeqs(t, s, "shop", 0, 100); !slices.Equal(got, seqs) {
		t.Fatalf("List after 40 enqueues = %v, want %v", got, seqs)
	}
	if d, err := s.Depths(context.Background()); err != nil || d["shop"] != 40 {
		t.Fatalf("Depths = %v, %v; want shop: 40", d, err)
	}
	if err := s.AckAll(context.Background(), "shop", seqs); err != nil {
		t.Fatal(err)
	}
	if got := listSeqs(t, s, "shop", 0, 100); len(got) != 0 {
		t.Errorf("List after every Ack = %v, want none", got)
	}
	if d, err := s.Depths(context.Background()); err != nil || len(d) != 0 {
		t.Errorf("Depths after every Ack = %v, %v; want none", d, err)
	}
	if n := queueVersions(t, s); n != 0 {
		t.Errorf("Badger holds %d versions of queue entries after 40 receipts were acknowledged, want 0", n)
	}
}

// Entries written to Badger (promoted) and entries the commit log alone
// holds are listed together in sequence order, from any point and with
// any limit, each once, and counted once by Depths.
func TestQueueListsHeldAndStoredEntriesInOrder(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	old := enqueueN(t, s, "shop", 10)
	if err := s.promoteHeld(^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if n := queueVersions(t, s); n != 10 {
		t.Fatalf("after the promotion Badger holds %d queue entries, want 10", n)
	}
	// Held entries after the stored ones (held ones below stored ones:
	// TestListMergesHeldEntriesBelowStoredOnesPastAnExpiredOne).
	all := append(old, enqueueN(t, s, "shop", 10)...)
	// Acknowledge some of each kind.
	acked := map[uint64]bool{all[0]: true, all[3]: true, all[10]: true, all[11]: true, all[19]: true}
	for seq := range acked {
		if err := s.Ack(ctx, "shop", seq); err != nil {
			t.Fatal(err)
		}
	}
	var want []uint64
	for _, seq := range all {
		if !acked[seq] {
			want = append(want, seq)
		}
	}
	for _, after := range []uint64{0, all[2], all[9], all[15]} {
		for _, limit := range []int{1, 3, 7, 100} {
			var w []uint64
			for _, seq := range want {
				if seq > after && len(w) < limit {
					w = append(w, seq)
				}
			}
			if got := listSeqs(t, s, "shop", after, limit); !slices.Equal(got, w) {
				t.Errorf("List(after %d, limit %d) = %v, want %v", after, limit, got, w)
			}
		}
	}
	if d, err := s.Depths(ctx); err != nil || d["shop"] != len(want) {
		t.Errorf("Depths = %v, %v; want shop: %d", d, err, len(want))
	}
}

// Queued receipts nobody acknowledged outlive the commit log segments
// that enqueued them: they are written to Badger before the segments go,
// and a crash after that loses none, in order.
func TestQueuedReceiptsOutliveTheCommitLogSegmentsThatEnqueuedThem(t *testing.T) {
	dir := t.TempDir()
	s := openSmallSegments(t, dir)
	ctx := context.Background()
	waiting := enqueueN(t, s, "shop", 20)
	// Receipts delivered and acknowledged at once, until the segments of
	// the waiting ones go.
	untilFirstSegmentGone(t, dir, func(int) {
		seq := enqueueN(t, s, "busy", 1)[0]
		if err := s.Ack(ctx, "busy", seq); err != nil {
			t.Fatal(err)
		}
	})
	if got := listSeqs(t, s, "shop", 0, 100); !slices.Equal(got, waiting) {
		t.Fatalf("List before the crash = %v, want %v", got, waiting)
	}
	s.held.mu.Lock()
	kept := 0
	for _, seq := range waiting {
		if _, ok := s.held.m[string(entryKey("shop", seq))]; ok {
			kept++
		}
	}
	s.held.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d of the waiting receipts are still kept in memory after their segment went, want none (written to Badger, forgotten)", kept)
	}
	s2 := crashReopen(t, s, dir)
	if got := listSeqs(t, s2, "shop", 0, 100); !slices.Equal(got, waiting) {
		t.Errorf("List after the crash = %v, want the %d waiting receipts %v", got, len(waiting), waiting)
	}
	if got := listSeqs(t, s2, "busy", 0, 100); len(got) != 0 {
		t.Errorf("acknowledged receipts came back after the crash: %v", got)
	}
}

// Queued receipts still held when the store closes are found after it
// reopens, the acknowledged ones not.
func TestQueuedReceiptsAreFoundAfterACleanClose(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	seqs := enqueueN(t, s, "shop", 3)
	if err := s.Ack(context.Background(), "shop", seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, dir)
	defer s2.Close()
	if got := listSeqs(t, s2, "shop", 0, 100); !slices.Equal(got, []uint64{seqs[0], seqs[2]}) {
		t.Errorf("List after a clean close and reopen = %v, want %v", got, []uint64{seqs[0], seqs[2]})
	}
}

// A promotion the committer finds has nothing to write (its entry was
// deleted meanwhile) reaches neither Badger nor the commit log, so a
// replay cannot bring the deleted entry back.
func TestASkippedPromotionIsNotInTheCommitLog(t *testing.T) {
	ws := []write{{key: entryKey("shop", 1), val: []byte("gone"), promote: true, skip: true}, {key: []byte("r/k"), val: []byte("v")}}
	rec := appendCommitRecord(nil, 9, [][]write{ws})
	var got []string
	if _, err := readCommitLog(rec, func(seq uint64, ws []write) error {
		for _, w := range ws {
			got = append(got, string(w.key))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"r/k"}) {
		t.Errorf("the commit record holds %q, want only [r/k]", got)
	}
}

// clockAt is a settable clock for a store's expiry.
type clockAt struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clockAt) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clockAt) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// enqueueExpiring enqueues a receipt into queue that expires after d.
func enqueueExpiring(t *testing.T, s *BadgerStore, queue string, now time.Time, d time.Duration) uint64 {
	t.Helper()
	seq, _, err := s.Enqueue(context.Background(), &QueueEntry{Queue: queue, Kind: "receipt", Body: []byte("id:x stat:DELIVRD"), Expires: now.Add(d)})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// Expired entries the commit log holds at the head of a queue do not use
// up List's limit: the live ones behind them are listed, as Depths counts
// them.
func TestListShowsLiveHeldEntriesBehindExpiredOnes(t *testing.T) {
	clk := &clockAt{now: time.Now()}
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var live []uint64
	for i := range 25 {
		if i < 20 {
			enqueueExpiring(t, s, "shop", clk.Now(), time.Minute)
		} else {
			live = append(live, enqueueExpiring(t, s, "shop", clk.Now(), time.Hour))
		}
	}
	clk.add(2 * time.Minute)
	if got := listSeqs(t, s, "shop", 0, 10); !slices.Equal(got, live) {
		t.Errorf("List(0, 10) with 20 expired entries ahead = %v, want the 5 live ones %v", got, live)
	}
	if d, err := s.Depths(context.Background()); err != nil || d["shop"] != len(live) {
		t.Errorf("Depths = %v, %v; want shop: %d", d, err, len(live))
	}
}

// Entries the commit log holds below entries already in Badger (a
// promotion done in part), one of them expired, are merged in order: List
// skips none.
func TestListMergesHeldEntriesBelowStoredOnesPastAnExpiredOne(t *testing.T) {
	clk := &clockAt{now: time.Now()}
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s1 := enqueueExpiring(t, s, "shop", clk.Now(), time.Minute)
	s2 := enqueueExpiring(t, s, "shop", clk.Now(), time.Hour)
	s3 := enqueueExpiring(t, s, "shop", clk.Now(), time.Hour)
	s4 := enqueueExpiring(t, s, "shop", clk.Now(), time.Hour)
	s5 := enqueueExpiring(t, s, "shop", clk.Now(), time.Hour)
	// Promote 4 and 5 only, as one chunk of a promotion may.
	var ws []write
	for _, w := range s.held.upTo(^uint64(0)) {
		if k := string(w.key); k == string(entryKey("shop", s4)) || k == string(entryKey("shop", s5)) {
			ws = append(ws, w)
		}
	}
	r := &request{writes: ws, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil || r.err != nil {
		t.Fatal(err, r.err)
	}
	if n := queueVersions(t, s); n != 2 {
		t.Fatalf("Badger holds %d queue entries, want the 2 promoted", n)
	}
	clk.add(2 * time.Minute) // s1 expires
	for limit, want := range map[int][]uint64{1: {s2}, 2: {s2, s3}, 3: {s2, s3, s4}, 10: {s2, s3, s4, s5}} {
		if got := listSeqs(t, s, "shop", 0, limit); !slices.Equal(got, want) {
			t.Errorf("List(0, %d) = %v, want %v (s1 = %d expired)", limit, got, want, s1)
		}
	}
}

// A receipt whose batch Badger applied but whose commit log sync failed
// (its writer was told it failed; a failed write may survive) is not lost
// with the dedup marker Badger kept: after a close and a reopen it is in
// the queue, so the upstream's resend, a duplicate, loses nothing.
func TestAReceiptWhoseLogSyncFailedAfterBadgerAppliedItIsNotLost(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	ctx := context.Background()
	e := &QueueEntry{Queue: "shop", Kind: "receipt", DedupKey: "smsc/m1/DELIVRD", Body: []byte("id:m1 stat:DELIVRD"), Expires: time.Now().Add(time.Hour)}
	s.clog.syncFault = func() error { return errors.New("input/output error") }
	if _, _, err := s.Enqueue(ctx, e); err == nil {
		t.Fatal("Enqueue with its commit log sync failing = nil error")
	}
	// Badger applied the rest of the batch: the entry joins it at once.
	if n, in := s.held.pending(^uint64(0)), queueVersions(t, s); n != 0 || in != 1 {
		t.Errorf("after the failed sync %d entries are held and %d in Badger, want the receipt in Badger", n, in)
	}
	_ = s.Close()
	s2 := openAt(t, dir)
	defer s2.Close()
	_, dup, err := s2.Enqueue(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if got := listSeqs(t, s2, "shop", 0, 10); len(got) != 1 {
		t.Errorf("after the failed sync, a close and a reopen the queue holds %v (resend a duplicate: %v), want the receipt once", got, dup)
	}
}

// A batch split because it did not fit one Badger transaction (carry)
// puts its queue entries again behind the forgotten first puts: they stay
// in sequence order, so a listing from any point, with any limit, returns
// what follows it.
func TestABatchSplitThatPutsQueueEntriesAgainKeepsThemInOrder(t *testing.T) {
	l := newHeldLog()
	prefix := queuePrefix("shop")
	put := func(seq, batch uint64) string {
		k := entryKey("shop", seq)
		l.put(&write{key: k, val: encodeEntry(nil, &QueueEntry{Queue: "shop", Seq: seq})}, batch)
		return string(k)
	}
	l.settled([]string{put(1, 9)}, 9, true) // the queue holds a durable entry
	var first []string
	for seq := uint64(2); seq <= 9; seq++ {
		first = append(first, put(seq, 10))
	}
	l.settled(first, 10, false) // did not fit: rebuilt with 2..4
	l.settled([]string{put(2, 10), put(3, 10), put(4, 10)}, 10, true)
	var next []string
	for seq := uint64(5); seq <= 10; seq++ {
		next = append(next, put(seq, 11))
	}
	l.settled(next, 11, true)
	q := l.queues[string(prefix)]
	if !slices.IsSortedFunc(q.es, func(a, b *heldEntry) int { return cmp.Compare(a.queueSeq, b.queueSeq) }) {
		t.Fatal("the queue's held entries are out of sequence order after a batch split")
	}
	for after := uint64(0); after <= 10; after++ {
		for _, limit := range []int{1, 3, 100} {
			got := l.list(prefix, after, limit, time.Now())
			var want []uint64
			for seq := after + 1; seq <= 10 && len(want) < limit; seq++ {
				want = append(want, seq)
			}
			if !slices.Equal(got.seqs, want) || len(got.live) != len(want) {
				t.Errorf("list(after %d, limit %d) = %v (%d live), want %v", after, limit, got.seqs, len(got.live), want)
			}
		}
	}
}

// Under writes large enough to split batches, a listing of the queue from
// every point returns as many of the entries after it as the limit allows,
// each after that point.
func TestQueueListingFromEveryPointUnderSplitBatches(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), MaxBatch: 512, GCInterval: -1, unlimitedBatch: true,
		tune: func(o badger.Options) badger.Options { return o.WithMemTableSize(1 << 20).WithValueThreshold(64 << 10) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	note := string(make([]byte, 1024))
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			now := time.Now()
			rec := &Record{Key: Key{Account: "acme", Key: fmt.Sprint("k", i)}, State: Sent, Upstream: "smsc", Created: now, Updated: now,
				Expires: now.Add(time.Hour), History: []Event{{At: now, State: Sent, Note: note}}}
			if _, _, err := s.Create(ctx, rec); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, _, err := s.Enqueue(ctx, &QueueEntry{Queue: "shop", Kind: "receipt", Body: []byte("id:x stat:DELIVRD")}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	all := listSeqs(t, s, "shop", 0, 1000)
	if len(all) != 400 || !slices.IsSorted(all) {
		t.Fatalf("List of the whole queue: %d entries, sorted %v; want 400 in order", len(all), slices.IsSorted(all))
	}
	for i, after := range append([]uint64{0}, all...) {
		want := all[i:min(len(all), i+10)]
		if got := listSeqs(t, s, "shop", after, 10); !slices.Equal(got, want) {
			t.Fatalf("List(after %d, 10) = %v, want %v", after, got, want)
		}
	}
}

// An Ack whose batch Badger applied but whose commit log sync failed is
// final, as it was when Badger held the queue: after a close and a reopen
// the acknowledged receipt is not delivered again.
func TestAnAckWhoseLogSyncFailedAfterBadgerAppliedItStaysFinal(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	ctx := context.Background()
	seqs := enqueueN(t, s, "shop", 2)
	s.clog.syncFault = func() error { return errors.New("input/output error") }
	if err := s.Ack(ctx, "shop", seqs[0]); err == nil {
		t.Fatal("Ack with its commit log sync failing = nil error")
	}
	if n := s.held.pending(^uint64(0)); n != 1 {
		t.Errorf("%d entries held after the failed sync, want 1 (the one not acknowledged)", n)
	}
	_ = s.Close()
	s2 := openAt(t, dir)
	defer s2.Close()
	if got := listSeqs(t, s2, "shop", 0, 10); !slices.Equal(got, seqs[1:]) {
		t.Errorf("after the failed sync of an Ack, a close and a reopen the queue holds %v, want only %v", got, seqs[1:])
	}
}

// An entry whose deletion is in flight is still listed and counted until
// that deletion is durable: a deletion that fails leaves it queued, and a
// listing in between must not have missed it; and the queue depth gauge,
// which its Ack lowers once the deletion is durable, must not have been
// set from a count without it (it read one too low, even -1, until the
// next count a minute later).
func TestAHeldEntryIsListedAndCountedUntilItsDeletionIsDurable(t *testing.T) {
	l := newHeldLog()
	prefix := queuePrefix("shop")
	k := entryKey("shop", 1)
	l.put(&write{key: k, val: encodeEntry(nil, &QueueEntry{Queue: "shop", Seq: 1})}, 1)
	l.settled([]string{string(k)}, 1, true)
	listed := func() int { return len(l.list(prefix, 0, 10, time.Now()).live) }
	counted := func() int {
		c, err := l.queueCounts(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c[string(prefix)].live
	}
	l.deleting(k, 2)
	if listed() != 1 || counted() != 1 {
		t.Errorf("while its deletion is in flight: listed %d, counted %d; want 1 and 1", listed(), counted())
	}
	l.settled([]string{string(k)}, 2, false)
	if listed() != 1 || counted() != 1 {
		t.Errorf("after its deletion failed: listed %d, counted %d; want 1 and 1", listed(), counted())
	}
	l.deleting(k, 3)
	l.settled([]string{string(k)}, 3, true)
	if listed() != 0 || counted() != 0 {
		t.Errorf("after its deletion was durable: listed %d, counted %d; want none", listed(), counted())
	}
}

// A Sent record's index entry that reached Badger (its commit log segment
// was to be removed) and was then put again (the record's TTL grew) must
// leave Badger when the record settles: the put again is held, and its
// deletion went to the commit log only, leaving Badger's copy for good
// (found by a review; each such entry cost a read at every recovery until
// its TTL).
func TestASentIndexEntryPutAgainAfterItsPromotionLeavesBadgerWhenItsRecordSettles(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	if _, _, err := s.Create(ctx, sentRecord("k", now)); err != nil {
		t.Fatal(err)
	}
	if err := s.promoteHeld(^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if n := liveKeys(t, s, prefixSent); n != 1 {
		t.Fatalf("after the promotion Badger holds %d Sent index entries, want 1", n)
	}
	old, err := s.Get(ctx, Key{Account: "acme", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	longer := old.Clone()
	longer.Expires = longer.Expires.Add(time.Hour)
	if err := s.Replace(ctx, old, longer); err != nil {
		t.Fatal(err)
	}
	accept(t, s, "k", now)
	if n := liveKeys(t, s, prefixSent); n != 0 {
		t.Errorf("Badger holds %d Sent index entries once the record left Sent, want 0", n)
	}
	if got := scanSent(t, s); len(got) != 0 {
		t.Errorf("ScanState(Sent) = %v, want none", got)
	}
}

// An entry put again while its promotion is in flight may be in Badger
// once that batch is durable: its deletion must go to Badger too.
func TestAnEntryPutAgainDuringItsPromotionIsDeletedFromBadgerToo(t *testing.T) {
	l := newHeldLog()
	k := sentKey([]byte("r/acme\x00k\x00"))
	w := &write{key: k, expiresAt: 1}
	l.settled([]string{l.put(w, 1)}, 1, true)
	if !l.promoted(&write{key: k, promote: true}, 2) {
		t.Fatal("the entry was not promoted")
	}
	l.put(&write{key: k, expiresAt: 2}, 2) // in the same batch
	l.settled([]string{string(k)}, 2, true)
	if held, toBadger := l.deleting(k, 3); !held || !toBadger {
		t.Errorf("deleting after a promotion and a put again: held %v, to Badger %v; want true, true", held, toBadger)
	}
}

// Once the commit log broke the store refuses every write until reopened,
// and Writable says so (readiness): before, it looked only at the free
// space, and /readyz answered ready while every submit got 0x08 (from
// review).
func TestTheStoreSaysItIsNotWritableOnceItsCommitLogBroke(t *testing.T) {
	s := openAt(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	if err := s.Writable(); err != nil {
		t.Fatalf("Writable() of a new store = %v", err)
	}
	s.clog.syncFault = func() error { return errors.New("input/output error") }
	if _, _, err := s.Create(ctx, sentRecord("k1", now)); err == nil {
		t.Fatal("Create with its commit log sync failing = nil error")
	}
	s.clog.syncFault = nil
	_, _, werr := s.Create(ctx, sentRecord("k2", now))
	if werr == nil {
		t.Fatal("Create after the commit log broke = nil error, want a refusal")
	}
	if err := s.Writable(); err == nil || err.Error() != werr.Error() {
		t.Errorf("Writable() after the commit log broke = %v, want the writes' refusal %q", err, werr)
	}
}
