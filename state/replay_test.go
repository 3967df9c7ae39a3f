package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// abandon leaves s as a killed process leaves it, except that Badger is
// closed behind the store's back (its memtables flushed: Badger holds
// every batch it was handed), the commit log left as it is; the held
// entries (heldlog.go) stay in the log alone. It returns the log's
// segments, oldest first.
func abandon(t *testing.T, s *BadgerStore, dir string) []string {
	t.Helper()
	// A dead process runs no goroutine: the checkpoint's trimming (which
	// syncs Badger) and the allocator trimming end first.
	close(s.stopCheckpoint)
	<-s.checkpointDone
	s.stopTrim()
	// A dead process writes nothing more, and leaves its files as they
	// are (the spare included): the segment's descriptor alone is closed.
	s.clog.spareWG.Wait()
	if s.clog.f != nil {
		_ = s.clog.f.Close()
	}
	s.stopPages()     // a dead process makes no pass over Badger's tables, which Close unmaps
	close(s.stopKeys) // nor builds its filter of keys from them
	<-s.keysDone
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "commit-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// openQuiet opens a store on dir with no background work that writes
// (collection, checkpoints, trimming), to be abandoned; rotate: the
// commit log's segment size (0: the default).
func openQuiet(t *testing.T, dir string, rotate int64) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, trimSyncAfter: -1, commitLogRotate: rotate})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reopen opens dir as serve does after a crash, closed at the end of the
// test.
func reopen(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	s := openAt(t, dir)
	t.Cleanup(func() { s.Close() })
	return s
}

// receiptEntry is receipt id's queue entry for account shop.
func receiptEntry(id string, now time.Time) *QueueEntry {
	return &QueueEntry{Queue: "shop", Kind: "receipt", DedupKey: "smsc/" + id + "/DELIVRD", Body: []byte("id:" + id), Expires: now.Add(time.Hour)}
}

// expectRedelivery enqueues e again and checks whether it is taken for a
// duplicate.
func expectRedelivery(t *testing.T, s *BadgerStore, e *QueueEntry, dup bool, what string) {
	t.Helper()
	if _, got, err := s.Enqueue(context.Background(), e); err != nil || got != dup {
		t.Errorf("%s: duplicate %v, err %v; want duplicate %v", what, got, err, dup)
	}
}

// recordEnds returns the offsets where each whole record of segment path
// ends.
func recordEnds(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	off := 0
	if _, err := readCommitLog(b, func(uint64, []write) error {
		off += commitHeader + int(binary.BigEndian.Uint32(b[off:]))
		ends = append(ends, off)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ends
}

func flipByte(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0xFF
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A log found damaged is not applied at all: the refused open leaves
// Badger as it was. Before, the replay applied the batches before the
// damage, stopped there and left keys as those earlier batches wrote them
// (an accepted record read as sent again), durable once the refused open
// closed Badger (from review).
func TestARefusedOpenOfADamagedLogLeavesBadgerAsItWas(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 4<<10)
	now := time.Now()
	createSent(t, s, now, "k")
	for i := range 100 {
		createSent(t, s, now, fmt.Sprint("filler-", i))
	}
	accept(t, s, "k", now)
	segs := abandon(t, s, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	flipByte(t, segs[1], 20) // the second segment: k's outcome is in a later one
	if _, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1}); !errors.Is(err, ErrStoreDamaged) {
		t.Fatalf("open with a damaged segment = %v, want ErrStoreDamaged", err)
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rec *Record
	if err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(recordKey(Key{Account: "acme", Key: "k"}))
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) (err error) { rec, err = decodeRecord(v); return err })
	}); err != nil {
		t.Fatal(err)
	}
	if rec.State != Accepted {
		t.Errorf("k in Badger after the refused open = %s, want %s as Badger held it", rec.State, Accepted)
	}
}

// Bad bytes in the last segment with a whole batch after them are damage,
// not a torn append (batches are appended one at a time, each synced
// before the next is written): the open is refused and the segment left
// whole. Before, everything from the bad bytes on was cut off for good,
// acknowledged batches with it (from review).
func TestBadBytesInTheLastSegmentFollowedByWholeBatchesAreDamageNotATornTail(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 0)
	now := time.Now()
	for i := range 50 {
		createSent(t, s, now, fmt.Sprint("k", i))
	}
	segs := abandon(t, s, dir)
	last := segs[len(segs)-1]
	ends := recordEnds(t, last)
	if len(ends) < 40 {
		t.Fatalf("%d batches in the last segment, want the 50 creates' (or most)", len(ends))
	}
	before, _ := os.Stat(last)
	flipByte(t, last, ends[len(ends)/2]+10) // inside a batch in the middle
	if _, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1}); !errors.Is(err, ErrStoreDamaged) {
		t.Errorf("open with a damaged batch before whole ones = %v, want ErrStoreDamaged", err)
	}
	if after, _ := os.Stat(last); after.Size() != before.Size() {
		t.Errorf("segment size after the refused open = %d, want %d (nothing cut)", after.Size(), before.Size())
	}
}

// When Badger holds batches the commit log lost (a power loss after
// Badger's memtable log reached the disk and before the log's record was
// synced; never acknowledged), the open mends what they left without the
// entries only the log had: a Sent record is found by the recovery scan,
// and the receipt whose queue entry is gone is taken again when the SMSC
// redelivers it. Before, the record stayed Sent unseen (every retry 0x58
// until it expired) and the redelivery was taken for a duplicate: the
// receipt was lost (from review).
func TestBatchesBadgerHeldAndTheCommitLogLostAreMendedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 0)
	ctx := context.Background()
	now := time.Now()
	createSent(t, s, now, "before")
	old := receiptEntry("m0", now)
	if _, _, err := s.Enqueue(ctx, old); err != nil {
		t.Fatal(err)
	}
	e := receiptEntry("m1", now)
	createSent(t, s, now, "k")
	if _, _, err := s.Enqueue(ctx, e); err != nil {
		t.Fatal(err)
	}
	segs := abandon(t, s, dir)
	last := segs[len(segs)-1]
	ends := recordEnds(t, last)
	if len(ends) < 4 {
		t.Fatalf("%d batches in the log, want the 4 writes'", len(ends))
	}
	// The log loses the last two batches (k's create, m1's enqueue).
	if err := os.Truncate(last, int64(ends[len(ends)-3])); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, dir)
	sent := map[string]bool{}
	if err := s2.ScanState(ctx, Sent, func(r *Record) bool { sent[r.Key.Key] = true; return true }); err != nil {
		t.Fatal(err)
	}
	if !sent["k"] || !sent["before"] {
		t.Errorf("Sent records found by the recovery scan = %v, want k and before", sent)
	}
	expectRedelivery(t, s2, e, false, "the SMSC's redelivery of the receipt whose entry was lost")
	expectRedelivery(t, s2, old, true, "a redelivery of the receipt the log held")
}

// Badger may hold a later batch and lack an earlier one (it replays each
// memtable's log apart, and they reach the disk in any order): the replay
// applies every batch of a whole log, not only those after Badger's
// high-water mark. A version of this replay that trusted the mark lost
// the record here, and the retry of its key would have been forwarded
// again (from review).
func TestTheReplayRestoresABatchBadgerLackedBeforeOneItHeld(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 0)
	ctx := context.Background()
	now := time.Now()
	createSent(t, s, now, "a", "k")
	accept(t, s, "k", now)
	createSent(t, s, now, "y", "z")
	// Badger loses k's batches (an older memtable's log that did not
	// reach the disk) and keeps the later ones, its high-water mark too.
	if err := s.db.DropPrefix(recordKey(Key{Account: "acme", Key: "k"})); err != nil {
		t.Fatal(err)
	}
	abandon(t, s, dir)
	s2 := reopen(t, dir)
	rec, err := s2.Get(ctx, Key{Account: "acme", Key: "k"})
	if err != nil {
		t.Fatalf("k after the replay = %v; the log holds its create and outcome", err)
	}
	if rec.State != Accepted {
		t.Errorf("k after the replay = %s, want %s", rec.State, Accepted)
	}
}

// The queue sequence number a replay needs to mend batches Badger held and
// the log lost is known even when no whole batch of the log survived (a
// segment begun at open or at rotation names it): the receipt queued in
// the lost batch is taken again at its redelivery. From review: the first
// batches after a restart lost that way left the marker, and the
// redelivery was taken for a duplicate.
func TestAReceiptLostWithTheOnlyBatchOfTheLogIsTakenAgain(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 0)
	ctx := context.Background()
	now := time.Now()
	old := receiptEntry("m0", now)
	if _, _, err := s.Enqueue(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openQuiet(t, dir, 0)
	e := receiptEntry("m1", now)
	if _, _, err := s.Enqueue(ctx, e); err != nil {
		t.Fatal(err)
	}
	segs := abandon(t, s, dir)
	if err := os.Truncate(segs[len(segs)-1], 0); err != nil { // the log keeps no batch
		t.Fatal(err)
	}
	s2 := reopen(t, dir)
	expectRedelivery(t, s2, e, false, "the SMSC's redelivery of the receipt whose entry was lost")
	expectRedelivery(t, s2, old, true, "a redelivery of a receipt queued before the restart")
}

// A torn append whose own data holds what looks like a record (a queued
// message's body can hold any bytes) is still a torn tail, cut at open:
// only a whole record of the next batch's number after the bad bytes is
// damage. From review: such a body made the open refuse the store.
func TestATornAppendCarryingARecordLikeBodyIsCutNotTakenForDamage(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, 0)
	ctx := context.Background()
	now := time.Now()
	createSent(t, s, now, "k")
	body := appendCommitRecord(nil, 12345, nil)
	e := &QueueEntry{Queue: "shop", Kind: "mo", Body: append(body, body...), Expires: now.Add(time.Hour)}
	if _, _, err := s.Enqueue(ctx, e); err != nil {
		t.Fatal(err)
	}
	segs := abandon(t, s, dir)
	last := segs[len(segs)-1]
	ends := recordEnds(t, last)
	// The enqueue's append torn 20 bytes short of its end.
	if err := os.Truncate(last, int64(ends[len(ends)-1]-20)); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, dir)
	if _, err := s2.Get(ctx, Key{Account: "acme", Key: "k"}); err != nil {
		t.Errorf("k, before the torn append = %v", err)
	}
}
