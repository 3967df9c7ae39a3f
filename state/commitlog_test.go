package state

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

func sampleBatch() [][]write {
	return [][]write{
		{{key: []byte(keyHWM), val: encodeHWM(7, time.Unix(1700000000, 0), 3)}},
		{
			{key: []byte("r/acme/k1"), val: []byte("record"), expiresAt: 1700003600},
			{key: []byte("j/s/1"), val: []byte{}},
			{key: []byte("s/r/acme/k0"), del: true},
		},
	}
}

func flatten(ws [][]write) []write {
	var out []write
	for _, w := range ws {
		out = append(out, w...)
	}
	return out
}

func sameWrites(a, b []write) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].key, b[i].key) || a[i].del != b[i].del || a[i].expiresAt != b[i].expiresAt ||
			(!a[i].del && !bytes.Equal(a[i].val, b[i].val)) {
			return false
		}
	}
	return true
}

// A batch record reads back as written, and a record cut anywhere (a
// torn tail) reads as nothing: the reader stops at the last whole record.
func TestCommitLogRecordRoundTripAndTornTail(t *testing.T) {
	want := flatten(sampleBatch())
	one := appendCommitRecord(nil, 7, sampleBatch())
	log := appendCommitRecord(slicesClone(one), 8, sampleBatch()[1:])
	var seqs []uint64
	end, err := readCommitLog(log, func(seq uint64, ws []write) error {
		seqs = append(seqs, seq)
		if seq == 7 && !sameWrites(ws, want) {
			t.Errorf("batch 7 read back as %+v, want %+v", ws, want)
		}
		return nil
	})
	if err != nil || end != len(log) || len(seqs) != 2 || seqs[0] != 7 || seqs[1] != 8 {
		t.Fatalf("readCommitLog = %d, %v, seqs %v; want %d, nil, [7 8]", end, err, seqs, len(log))
	}
	for cut := len(one); cut < len(log); cut++ {
		n := 0
		end, _ := readCommitLog(log[:cut], func(uint64, []write) error { n++; return nil })
		if end != len(one) || n != 1 {
			t.Fatalf("log cut at %d: read %d records up to %d, want 1 up to %d", cut, n, end, len(one))
		}
	}
	flipped := slicesClone(log)
	flipped[len(one)+20] ^= 1
	if end, _ := readCommitLog(flipped, func(uint64, []write) error { return nil }); end != len(one) {
		t.Errorf("a flipped bit in the second record: read up to %d, want %d", end, len(one))
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// The commit log is read at every open from whatever a crash left: no
// content makes the reader panic, it never reads past what it was given,
// and what it reads re-encodes to exactly the bytes it consumed.
func FuzzReadCommitLog(f *testing.F) {
	one := appendCommitRecord(nil, 7, sampleBatch())
	f.Add(one)
	f.Add(appendCommitRecord(slicesClone(one), 8, nil))
	f.Add(one[:len(one)-3])
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		end, err := readCommitLog(b, func(seq uint64, ws []write) error {
			again = appendCommitRecord(again, seq, [][]write{ws})
			return nil
		})
		if err != nil {
			t.Fatalf("readCommitLog = %v", err)
		}
		if end < 0 || end > len(b) {
			t.Fatalf("readCommitLog end %d outside [0, %d]", end, len(b))
		}
		if !bytes.Equal(again, b[:end]) {
			t.Fatalf("records re-encode to %x, read from %x", again, b[:end])
		}
	})
}

// Segments rotate at their size limit and trimming removes those
// Badger holds durably (never the current one); what they held is still
// there after a crash (no Close) and a reopen. Here no memtable fills, so
// trimming syncs Badger's logs (trimSyncAfter has passed at once).
func TestCommitLogRotatesAndCheckpointRemovesOldSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: 4 << 10, trimSyncAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for i := range 200 {
		k := Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		rec := &Record{Key: k, State: Sent, Upstream: "smsc", Created: now, Updated: now, Expires: now.Add(time.Hour),
			History: []Event{{At: now, State: Sent}}}
		if _, _, err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
		return m
	}
	if n := len(segs()); n < 3 {
		t.Fatalf("%d commit log segments after 200 commits of ~100 bytes with 4 KiB segments, want several", n)
	}
	if err := s.syncBadgerAll(); err != nil {
		t.Fatal(err)
	}
	if err := s.truncateCommitLog(); err != nil {
		t.Fatalf("truncateCommitLog() = %v", err)
	}
	if got := segs(); len(got) != 1 {
		t.Errorf("segments after a checkpoint with Badger synced = %v, want only the current one", got)
	}
	s2 := crashReopen(t, s, dir)
	for i := range 200 {
		if _, err := s2.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatalf("Get(k%d) after reopen = %v", i, err)
		}
	}
}

// A batch of the log that no longer fits in one Badger transaction (the
// memtable was made smaller since it was committed) is still replayed
// whole.
func TestCommitLogReplaysABatchBiggerThanATransaction(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ws []write
	for i := range 20000 {
		ws = append(ws, write{key: fmt.Appendf(nil, "r/k%05d", i), val: bytes.Repeat([]byte{'v'}, 20)})
	}
	if err := applyBatch(db, ws); err != nil {
		t.Fatalf("applyBatch(20000 writes, 1 MiB memtable) = %v", err)
	}
	n := 0
	_ = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if n != len(ws) {
		t.Errorf("%d keys after the replay, want %d", n, len(ws))
	}
}

// The commit log stays bounded while the store runs, even with the
// marker checkpoints disabled: rotated segments are removed in the
// background once Badger holds them durably (here, where no memtable
// fills, by syncing Badger's logs once a segment has waited
// trimSyncAfter).
func TestCommitLogIsTrimmedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: 4 << 10, trimSyncAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	for i := range 200 {
		rec := &Record{Key: Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}, State: Sent, Upstream: "smsc",
			Created: now, Updated: now, Expires: now.Add(time.Hour), History: []Event{{At: now, State: Sent}}}
		if _, _, err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
		return len(m)
	}
	if n := segs(); n < 3 {
		t.Fatalf("%d segments after 200 commits with 4 KiB segments, want several", n)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return segs() == 1 },
		"rotated commit log segments are never removed while the store runs")
}

// Under steady writes the commit log is trimmed as Badger flushes its
// memtables into tables, without syncing Badger's memtable logs (whose
// pages then need never be written): with the sync way put an hour off,
// the rotated segments still go, in order, and every record is there
// after a reopen.
func TestCommitLogIsTrimmedByMemtableFlushesWithoutSyncingBadger(t *testing.T) {
	dir := t.TempDir()
	opts := BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: 64 << 10,
		MemtableSize: 1 << 20, trimSyncAfter: time.Hour}
	s, err := OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	segs := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
		return m
	}
	var firstSeg string
	const n = 20000
	for i := range n {
		rec := &Record{Key: Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}, State: Sent, Upstream: "smsc",
			Owner: strings.Repeat("o", 64), Created: now, Updated: now, Expires: now.Add(time.Hour),
			History: []Event{{At: now, State: Sent, Note: strings.Repeat("n", 64)}}}
		if _, _, err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstSeg = segs()[0]
		}
	}
	if fids, err := memLogFids(dir); err != nil || fids.oldest <= 1 {
		t.Fatalf("memtable logs %+v, %v after %d records in 1 MiB memtables: want some flushed", fids, err, n)
	}
	testkit.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(firstSeg)
		return os.IsNotExist(err)
	}, "the oldest commit log segment is never removed although its memtable was flushed")
	left := segs()
	if len(left) == 0 || left[0] < firstSeg {
		t.Fatalf("segments left %v: want the newer ones only, in order", left)
	}
	// Not removed out of order: what remains is a run of the newest.
	all := append([]string(nil), left...)
	slices.Sort(all)
	if !slices.Equal(all, left) {
		t.Errorf("segments left %v are not the newest in order", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatalf("reopen = %v", err)
	}
	defer s2.Close()
	for i := range n {
		if _, err := s2.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatalf("Get(k%d) after reopen = %v", i, err)
		}
	}
}

// Commit log segments after the first are made from a spare written with
// zeros ahead of time (an append then changes neither the file's size nor
// its extents, so its fdatasync flushes data alone): such a segment is as
// long as the rotation size from its first batch, the zeros it has not used yet are
// not taken for damage when the log is replayed after a crash, and no
// spare is left behind by a clean stop.
func TestCommitLogSegmentsArePreallocatedAndTheirUnusedZerosAreNotDamage(t *testing.T) {
	dir := t.TempDir()
	const rotate = 64 << 10
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, commitLogRotate: rotate})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	const n = 1000 // several segments, the last one part full
	for i := range n {
		rec := &Record{Key: Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}, State: Sent, Upstream: "smsc",
			Created: now, Updated: now, Expires: now.Add(time.Hour), History: []Event{{At: now, State: Sent}}}
		if _, _, err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "commit-*.log"))
	if len(segs) < 2 {
		t.Fatalf("segments %v after %d commits with %d-byte segments, want several", segs, n, rotate)
	}
	for _, sg := range segs[1:] { // the first after an open is an empty file
		fi, err := os.Stat(sg)
		if err != nil || fi.Size() < rotate {
			t.Errorf("segment %s: %v, %v; want at least %d bytes from its first batch", filepath.Base(sg), fi.Size(), err, rotate)
		}
	}
	last, _ := os.ReadFile(segs[len(segs)-1])
	if len(bytes.TrimRight(last, "\x00")) == len(last) {
		t.Fatalf("the current segment has no unused zeros (%d bytes): the test needs one part full", len(last))
	}
	s2 := crashReopen(t, s, dir) // with its part-used segments
	if lost := s2.Stats().LostCommits; lost != 0 {
		t.Errorf("LostCommits = %d after the reopen, want 0", lost)
	}
	for i := range n {
		if _, err := s2.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatalf("Get(k%d) after reopen = %v", i, err)
		}
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "commit-*")); len(left) != 0 {
		t.Errorf("files left by a clean stop: %v, want no segment and no spare", left)
	}
}

// crashReopen abandons s as a killed process leaves it (no Close: the
// directory lock is released by closing Badger behind the store's back,
// the commit log left as it is) and opens dir again, closed at the end of
// the test.
func crashReopen(t *testing.T, s *BadgerStore, dir string) *BadgerStore {
	t.Helper()
	abandon(t, s, dir)
	return reopen(t, dir)
}
