package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The commit log (BadgerOptions.NoCommitLog) is the store's own write-ahead
// log. Each committed batch, already encoded (puts with their TTL,
// deletes, and the commit's high-water mark), is appended to the current
// segment file of the store directory with one write and one fdatasync;
// Badger applies the same batch without syncing its own log; the
// batch's writers are released once both are done. Badger's memtable
// log is then only synced at a checkpoint: a segment is removed once
// Badger's active memtable log and value log are synced and every older
// memtable is flushed into a (synced) table, which is when Badger alone
// holds everything the segment holds.
//
// At open, before anything reads the store (and before the marker and
// high-water-mark checks), every segment is replayed into Badger in
// order: blind puts and deletes, so a batch Badger already holds is
// harmless to apply again. A segment ends at its last whole batch: a
// torn tail (a crash during an append, never acknowledged) is cut off.
//
// Segment files are named commit-<first sequence number, 20 digits>.log.
// A batch record is
//
//	4 bytes length of what follows the checksum (big-endian)
//	4 bytes CRC-32C of it
//	8 bytes sequence number (the commit count after this commit)
//	uvarint number of entries, then each entry:
//	  1 byte kind (0 put, 1 delete)
//	  uvarint key length, key
//	  put only: uvarint value length, value, uvarint expiresAt (Unix s, 0 none)

const (
	commitLogPrefix = "commit-"
	commitLogSuffix = ".log"
	// commitLogRotate: a segment that reaches this size is closed and a
	// new one started; the checkpoint goroutine then removes it (within
	// a second, once Badger holds it durably). It bounds the replay at
	// open: 16 MiB of batches replay in ~0.6 s here.
	commitLogRotate = 16 << 20
	// maxCommitRecord bounds one record (a batch is at most 15% of a
	// memtable; this leaves room for any memtable size Badger accepts).
	maxCommitRecord = 1 << 30
	commitHeader    = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// commitLogName is the name of the segment whose first batch is first,
// begun when the last queue sequence number given was qseq (what a replay
// needs when no whole batch of the log survived, see repairAhead).
func commitLogName(first, qseq uint64) string {
	return fmt.Sprintf("%s%020d-q%d%s", commitLogPrefix, first, qseq, commitLogSuffix)
}

// parseCommitLogName returns the first sequence number of a segment name
// and the queue sequence number it was begun at (hasQ false in a name of
// a version before it carried one: commit-<first>.log).
func parseCommitLogName(name string) (first, qseq uint64, hasQ, ok bool) {
	if !strings.HasPrefix(name, commitLogPrefix) || !strings.HasSuffix(name, commitLogSuffix) {
		return 0, 0, false, false
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(name, commitLogPrefix), commitLogSuffix)
	f, q, hasQ := strings.Cut(mid, "-q")
	first, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return 0, 0, false, false
	}
	if hasQ {
		if qseq, err = strconv.ParseUint(q, 10, 64); err != nil {
			return 0, 0, false, false
		}
	}
	return first, qseq, hasQ, true
}

// appendCommitRecord appends the record of batch seq (writes ws, in
// order) to b.
func appendCommitRecord(b []byte, seq uint64, ws [][]write) []byte {
	start := len(b)
	b = append(b, make([]byte, commitHeader)...)
	b = binary.BigEndian.AppendUint64(b, seq)
	n := 0
	for _, w := range ws {
		for i := range w {
			if !w[i].skip {
				n++
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, w := range ws {
		for i := range w {
			if !w[i].skip {
				b = appendCommitEntry(b, &w[i])
			}
		}
	}
	body := b[start+commitHeader:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

func appendCommitEntry(b []byte, w *write) []byte {
	if w.del {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(w.key)))
		return append(b, w.key...)
	}
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(w.key)))
	b = append(b, w.key...)
	b = binary.AppendUvarint(b, uint64(len(w.val)))
	b = append(b, w.val...)
	return binary.AppendUvarint(b, w.expiresAt)
}

var errCommitRecord = errors.New("bad commit log record")

// readCommitLog decodes the whole records at the start of b and calls fn
// with each one's sequence number and writes (their keys and values
// alias b). It returns the length of the whole records read: anything
// after it is a torn or damaged tail. An error from fn stops it.
func readCommitLog(b []byte, fn func(seq uint64, ws []write) error) (int, error) {
	off := 0
	var ws []write
	for {
		seq, got, size, ok := recordAt(b[off:], ws[:0])
		if !ok {
			return off, nil
		}
		ws = got
		if err := fn(seq, ws); err != nil {
			return off, err
		}
		off += size
	}
}

// recordAt decodes the record b starts with, when it is whole and valid
// (its length in bounds, its CRC, its body): its batch's sequence number,
// its writes (appended to ws; keys and values alias b) and its size.
func recordAt(b []byte, ws []write) (seq uint64, _ []write, size int, ok bool) {
	if len(b) < commitHeader {
		return 0, ws, 0, false
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxCommitRecord || uint64(len(b)-commitHeader) < uint64(n) {
		return 0, ws, 0, false
	}
	body := b[commitHeader : commitHeader+int(n)]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return 0, ws, 0, false
	}
	seq, ws, err := decodeCommitBody(body, ws)
	return seq, ws, commitHeader + int(n), err == nil
}

func decodeCommitBody(b []byte, ws []write) (uint64, []write, error) {
	if len(b) < 8 {
		return 0, ws, errCommitRecord
	}
	seq := binary.BigEndian.Uint64(b)
	b = b[8:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return 0, ws, errCommitRecord
	}
	b = b[k:]
	for range n {
		if len(b) < 1 || b[0] > 1 {
			return 0, ws, errCommitRecord
		}
		w := write{del: b[0] == 1}
		b = b[1:]
		var ok bool
		if w.key, b, ok = uvarintBytes(b); !ok {
			return 0, ws, errCommitRecord
		}
		if !w.del {
			if w.val, b, ok = uvarintBytes(b); !ok {
				return 0, ws, errCommitRecord
			}
			if w.val == nil {
				w.val = []byte{}
			}
			var k int
			if w.expiresAt, k = binary.Uvarint(b); k <= 0 {
				return 0, ws, errCommitRecord
			}
			b = b[k:]
		}
		ws = append(ws, w)
	}
	if len(b) != 0 {
		return 0, ws, errCommitRecord
	}
	return seq, ws, nil
}

func uvarintBytes(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n) : k+int(n)], b[k+int(n):], true
}

// segment is one commit log file.
type segment struct {
	first uint64
	path  string
	// qseq is the last queue sequence number given when it was begun
	// (hasQ: its name says).
	qseq uint64
	hasQ bool
	// vlog: a value of its batches went to Badger's value log, which a
	// memtable flush does not sync.
	vlog bool
	// bound is, once every batch of the segment is applied, the newest
	// memtable log then (its batches are in that memtable or older ones);
	// 0 until seen. seen is when.
	bound uint64
	seen  time.Time
}

// listSegments returns the commit log segments of dir, oldest first.
func listSegments(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state: read store directory: %w", err)
	}
	var segs []segment
	for _, e := range ents {
		if first, q, hasQ, ok := parseCommitLogName(e.Name()); ok && e.Type().IsRegular() {
			segs = append(segs, segment{first: first, path: filepath.Join(dir, e.Name()), qseq: q, hasQ: hasQ})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.first, b.first) })
	return segs, nil
}

// replayResult is what replaying the commit log found.
type replayResult struct {
	last    uint64   // sequence number of the last batch replayed (0: none)
	batches int      // batches replayed
	damage  []string // problems that lost acknowledged commits
	lost    uint64   // commits known lost by them
	// ahead: Badger held commits after the log's last whole batch. The
	// log's record of a batch is synced while Badger applies it, and
	// Badger's memtable log (a shared mapping of its file) can reach the
	// disk first; a power loss between the two leaves Badger with the
	// batch's ordinary writes and without its held ones (heldlog.go),
	// which only the log had. The batch was never acknowledged, but what
	// it leaves must be mended (repairAhead).
	ahead bool
	// qseq is the last queue sequence number given as of the log's last
	// whole batch (its high-water mark's, or its segment's name when it
	// has none); hasQ false when the log does not say (written by an
	// earlier version).
	qseq uint64
	hasQ bool
}

// logPart is a segment's part to replay: its whole batches end at end;
// torn is set when a torn tail follows them, cut once they are applied.
type logPart struct {
	sg   segment
	end  int
	torn bool
}

// replayCommitLog applies the commit log of dir to db, oldest batch
// first, cutting a torn tail off the last segment. base is the
// high-water mark Badger held before the replay: a log that starts after
// base+1 means commits are missing from both.
//
// The whole log is read and checked before anything is applied: damage
// (a segment that does not continue the one before, bad bytes before the
// end of a segment that is not the last, or followed by a whole batch in
// the last) leaves Badger and the log as they were, for the refused open
// (from review: the batches applied before the damage rolled keys back
// to older values, durable once the refused open closed Badger, and bad
// bytes in the last segment cut the whole batches after them off for
// good); with applyDamaged (the operator forced the open) the batches
// before the damage are applied. Batches are applied whole: Badger may
// lack an earlier batch and hold a later one (it replays each memtable's
// log apart, and they reach the disk in any order), so its high-water
// mark does not tell which it holds. Only the high-water mark itself is
// never written backwards.
func replayCommitLog(db *badger.DB, dir string, base uint64, applyDamaged bool) (replayResult, error) {
	var res replayResult
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		return res, err
	}
	parts, next, err := checkCommitLog(segs, base, &res)
	if err != nil {
		return res, err
	}
	if len(res.damage) > 0 && !applyDamaged {
		return res, nil
	}
	var apply []write
	for _, p := range parts {
		b, err := os.ReadFile(p.sg.path)
		if err != nil {
			return res, fmt.Errorf("state: read commit log: %w", err)
		}
		if _, err := readCommitLog(b[:p.end], func(seq uint64, ws []write) error {
			apply = apply[:0]
			for _, w := range ws {
				if seq < base && string(w.key) == keyHWM {
					continue // Badger's is later
				}
				apply = append(apply, w)
			}
			if err := applyBatch(db, apply); err != nil {
				return err
			}
			res.last = seq
			res.batches++
			return nil
		}); err != nil {
			return res, fmt.Errorf("state: replay commit log %s: %w", filepath.Base(p.sg.path), err)
		}
		// A torn tail: the batch being appended when the process or the
		// machine stopped. It was never acknowledged.
		if p.torn {
			if err := truncateSync(p.sg.path, int64(p.end)); err != nil {
				return res, err
			}
		}
	}
	res.ahead = len(res.damage) == 0 && base > next-1
	return res, nil
}

// checkCommitLog reads segs and returns the parts of them to replay and
// the sequence number the log continues with, adding to res what it finds
// damaged and the queue sequence number the log ends at.
func checkCommitLog(segs []segment, base uint64, res *replayResult) ([]logPart, uint64, error) {
	next := segs[0].first
	res.qseq, res.hasQ = segs[0].qseq, segs[0].hasQ
	if next > base+1 {
		res.damage = append(res.damage, fmt.Sprintf("its commit log starts at commit %d but the store holds %d commits: %d commits lost",
			next, base, next-base-1))
		res.lost = next - base - 1
	}
	var parts []logPart
	for i, sg := range segs {
		if sg.first != next {
			res.damage = append(res.damage, fmt.Sprintf("commit log segment %s does not continue the one before (commit %d expected)", filepath.Base(sg.path), next))
			return parts, next, nil
		}
		b, err := os.ReadFile(sg.path)
		if err != nil {
			return nil, 0, fmt.Errorf("state: read commit log: %w", err)
		}
		end, err := readCommitLog(b, func(seq uint64, ws []write) error {
			if seq != next {
				return fmt.Errorf("batch %d where %d was expected", seq, next)
			}
			if q, ok := batchQueueSeqOf(ws); ok {
				res.qseq, res.hasQ = q, true
			}
			next = seq + 1
			return nil
		})
		if err != nil {
			return nil, 0, fmt.Errorf("state: replay commit log %s: %w", filepath.Base(sg.path), err)
		}
		part := logPart{sg: sg, end: end}
		switch {
		case end == len(b) || allZero(b[end:]):
			// (the unused part of a segment made from the spare)
		case i < len(segs)-1:
			res.damage = append(res.damage, fmt.Sprintf("commit log segment %s is damaged at byte %d of %d (and is not the last)", filepath.Base(sg.path), end, len(b)))
			return append(parts, part), next, nil
		case batchAfter(b[end+1:], next+1):
			// Batches are appended one at a time, each synced before the
			// next is written: a torn append is the last thing in the
			// segment, and a whole batch after the bad bytes was synced.
			res.damage = append(res.damage, fmt.Sprintf("commit log segment %s is damaged at byte %d of %d, with whole batches after it", filepath.Base(sg.path), end, len(b)))
			return append(parts, part), next, nil
		default:
			part.torn = true
		}
		parts = append(parts, part)
	}
	return parts, next, nil
}

// batchQueueSeqOf is the last queue sequence number a batch's high-water
// mark says was given (ok false: no mark, or one without it).
func batchQueueSeqOf(ws []write) (uint64, bool) {
	for _, w := range ws {
		if !w.del && string(w.key) == keyHWM {
			if _, _, q, hasQ, err := decodeHWM(w.val); err == nil && hasQ {
				return q, true
			}
		}
	}
	return 0, false
}

// batchAfter reports whether a whole, valid record of batch seq begins
// anywhere in b (a record of another number there is data of the torn
// batch's, such as a queued message's body, not a batch).
func batchAfter(b []byte, seq uint64) bool {
	for off := 0; len(b)-off >= commitHeader+8; off++ {
		if binary.BigEndian.Uint64(b[off+commitHeader:]) != seq {
			continue // (the body begins with the batch's number)
		}
		if got, _, _, ok := recordAt(b[off:], nil); ok && got == seq {
			return true
		}
	}
	return false
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("state: cut the torn tail of the commit log: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("state: cut the torn tail of the commit log: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("state: cut the torn tail of the commit log: %w", err)
	}
	return nil
}

// applyBatch writes ws to db in one transaction, as it was committed;
// should it no longer fit (Badger's limits follow MemtableSize, which may
// have shrunk since), in consecutive ones.
func applyBatch(db *badger.DB, ws []write) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for i := 0; i < len(ws); i++ {
		err := setWrites(txn, ws[i:i+1])
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err = txn.Commit(); err == nil {
				txn = db.NewTransaction(true)
				err = setWrites(txn, ws[i:i+1])
			}
		}
		if err != nil {
			return err
		}
	}
	return txn.Commit()
}

// commitLog is the open commit log: the segment being appended to and
// the older ones a checkpoint may remove. write and sync run on the
// committer's goroutine.
type commitLog struct {
	dir    string
	rotate int64
	// vlogAt is Badger's value threshold: a value at least this long goes
	// to its value log (0: none does).
	vlogAt int

	f    *os.File
	size int64
	buf  []byte
	// qseq is the last queue sequence number given as of the last batch
	// written (its high-water mark's): the next segment's name carries it.
	qseq uint64
	// broken: a failed write or sync (the log's tail is unknown), or a
	// batch the log holds that Badger refused (set by the batch's outcome,
	// on Badger's callback goroutine): the store refuses writes until it
	// is reopened. Read with refusal, from any goroutine (the committer,
	// BadgerStore.Writable, readiness).
	broken atomic.Pointer[error]
	// syncFault, set by tests (before the batch whose sync is to fail;
	// the committer reads it), fails a sync that succeeded (a disk's I/O
	// error).
	syncFault func() error

	mu   sync.Mutex
	segs []segment // every segment, oldest first; the last is f

	// The spare: the next segment's file, written with zeros and synced
	// ahead of time (spareName), once the current segment is a quarter
	// full, so that appending to a segment only overwrites blocks the
	// file already has and its fdatasync flushes data alone, no file-size
	// or extent change (2-3 times faster here). The first segment after
	// an open is an empty file. spareOK: it is ready; preparing: a
	// goroutine (spareWG) writes it.
	spareOK, preparing bool
	spareWG            sync.WaitGroup
	closed             bool
}

// spareName is the file of the spare segment (not a segment: listSegments
// skips it).
const spareName = "commit-spare.tmp"

// openCommitLog starts a new segment whose first batch will be next;
// old lists the segments already there (replayed).
func openCommitLog(dir string, next, qseq uint64, old []segment, rotate int64) (*commitLog, error) {
	l := &commitLog{dir: dir, rotate: cmp.Or(rotate, commitLogRotate), segs: old, qseq: qseq}
	if err := l.startSegment(next); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *commitLog) startSegment(first uint64) error {
	path := filepath.Join(l.dir, commitLogName(first, l.qseq))
	f, err := l.takeSpare(path)
	if err != nil {
		return fmt.Errorf("state: start commit log segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("state: start commit log segment: %w", err)
	}
	if l.f != nil {
		_ = l.f.Close()
	}
	l.f, l.size = f, 0
	l.mu.Lock()
	if n := len(l.segs); n > 0 && l.segs[n-1].first == first {
		l.segs = l.segs[:n-1] // an empty segment of the same name, truncated
	}
	l.segs = append(l.segs, segment{first: first, path: path, qseq: l.qseq, hasQ: true})
	l.mu.Unlock()
	return nil
}

// takeSpare opens path as the new segment: the spare renamed, when it is
// ready, else a new empty file.
func (l *commitLog) takeSpare(path string) (*os.File, error) {
	l.mu.Lock()
	ready := l.spareOK
	l.spareOK = false
	l.mu.Unlock()
	if ready {
		if err := os.Rename(filepath.Join(l.dir, spareName), path); err == nil {
			return os.OpenFile(path, os.O_WRONLY, 0)
		}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
}

// prepareSpare starts writing the spare unless it is ready or being
// written. A spare that cannot be written is not an error: the next
// segment is then a new empty file, as the first one is.
func (l *commitLog) prepareSpare() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spareOK || l.preparing || l.closed {
		return
	}
	l.preparing = true
	l.spareWG.Add(1)
	go func() {
		defer l.spareWG.Done()
		err := writeZeros(filepath.Join(l.dir, spareName), l.rotate)
		if err == nil {
			err = syncDir(l.dir)
		}
		l.mu.Lock()
		l.preparing, l.spareOK = false, err == nil
		l.mu.Unlock()
	}()
}

// writeZeros writes a file of size zero bytes and syncs it.
func writeZeros(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	zeros := make([]byte, min(size, 1<<20))
	for left := size; left > 0 && err == nil; left -= int64(len(zeros)) {
		_, err = f.Write(zeros[:min(left, int64(len(zeros)))])
	}
	if err == nil {
		err = fdatasync(f)
	}
	return errors.Join(err, f.Close())
}

// allZero reports whether b holds zero bytes only: the unused part of a
// segment made from the spare.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// write writes batch seq (the requests' writes after hwm, the
// high-water mark's write), and sync then makes it durable: the batch
// counts as logged once both have succeeded. After a failure of either,
// every later write fails (and so no sync follows): what the segment's
// tail holds is unknown.
func (l *commitLog) write(seq uint64, hwm write, reqs []*request) error {
	if err := l.refusal(); err != nil {
		return err
	}
	if l.size >= l.rotate {
		if err := l.startSegment(seq); err != nil {
			return err
		}
	}
	ws := make([][]write, 0, len(reqs)+1)
	ws = append(ws, []write{hwm})
	for _, r := range reqs {
		ws = append(ws, r.writes)
	}
	l.buf = appendCommitRecord(l.buf[:0], seq, ws)
	if _, err := l.f.Write(l.buf); err != nil {
		return l.fail(err)
	}
	l.size += int64(len(l.buf))
	if q, ok := batchQueueSeqOf(ws[0]); ok {
		l.qseq = q
	}
	return nil
}

// sync makes the batch write wrote (of reqs) durable; it follows a write
// that succeeded.
func (l *commitLog) sync(reqs []*request) error {
	err := fdatasync(l.f)
	if l.syncFault != nil && err == nil {
		err = l.syncFault()
	}
	if err != nil {
		return l.fail(err)
	}
	if l.size >= l.rotate/4 {
		// The next segment's spare, once this one is well under way (a
		// store that writes little never makes one).
		l.prepareSpare()
	}
	if l.vlogAt > 0 && toValueLog(reqs, l.vlogAt) {
		l.mu.Lock()
		l.segs[len(l.segs)-1].vlog = true
		l.mu.Unlock()
	}
	if cap(l.buf) > 4<<20 {
		l.buf = nil
	}
	return nil
}

// fail marks the log broken by err and returns that.
func (l *commitLog) fail(err error) error {
	return l.setBroken(fmt.Errorf("state: commit log: %w (the store refuses writes until it is reopened)", err))
}

// setBroken marks the log broken by err (every later write fails) and
// returns err.
func (l *commitLog) setBroken(err error) error {
	l.broken.Store(&err)
	return err
}

// refusal is the error the store refuses writes with since the log broke,
// nil while it is whole (or there is no log); safe from any goroutine.
func (l *commitLog) refusal() error {
	if l == nil {
		return nil
	}
	if p := l.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// removable returns the segments whose batches are all at or below
// applied (never the current one).
func (l *commitLog) removable(applied uint64) []segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []segment
	for i := 0; i+1 < len(l.segs); i++ {
		if l.segs[i+1].first-1 > applied {
			break
		}
		out = append(out, l.segs[i])
	}
	return out
}

// toValueLog reports whether a put of reqs has a value of at least
// threshold bytes (Badger writes it to its value log).
func toValueLog(reqs []*request, threshold int) bool {
	for _, r := range reqs {
		for _, w := range r.writes {
			if !w.del && len(w.val) >= threshold {
				return true
			}
		}
	}
	return false
}

// bounded gives each of segs (removable: every batch applied) that has
// no bound yet the bound newest (the newest memtable log now) and returns
// segs as the log now holds them.
func (l *commitLog) bounded(segs []segment, newest uint64, now time.Time) []segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range segs {
		for j := range l.segs {
			if sg := &l.segs[j]; sg.path == segs[i].path {
				if sg.bound == 0 {
					sg.bound, sg.seen = max(newest, 1), now
				}
				segs[i] = *sg
			}
		}
	}
	return segs
}

// removed forgets segments (removed from the disk).
func (l *commitLog) removed(segs []segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segs = slices.DeleteFunc(l.segs, func(s segment) bool {
		return slices.ContainsFunc(segs, func(r segment) bool { return r.path == s.path })
	})
}

// close closes the current segment and removes the spare (once written).
func (l *commitLog) close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.spareWG.Wait()
	if err := os.Remove(filepath.Join(l.dir, spareName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// truncateCommitLog removes the oldest segments of the commit log whose
// batches Badger holds durably, in order (a newer segment never goes
// before an older one: replaying the older alone would put back what the
// newer overwrote). It runs on the checkpoint goroutine, over the
// segments before the current one. A segment's batches are durable in
// Badger once every memtable that may hold them has been flushed into a
// table (synced; the memtable's log is then deleted), which costs nothing
// more: Badger's memtable logs are never synced on this path, so their
// pages need not be written at all. A segment still waiting after
// trimSyncAfter (a memtable filling slowly), or one with a value in
// Badger's value log (a flush does not sync that log), is made durable
// the other way: Badger's active memtable log and value log are synced,
// provided no older memtable waits for its flush.
func (s *BadgerStore) truncateCommitLog() error {
	segs := s.clog.removable(s.committed.Load())
	if len(segs) == 0 {
		return nil
	}
	fids, err := memLogFids(s.path)
	if err != nil {
		return err
	}
	now := time.Now()
	segs = s.clog.bounded(segs, fids.newest, now)
	n := 0 // segments whose memtables are all flushed
	for n < len(segs) && !segs[n].vlog && fids.oldest > segs[n].bound {
		n++
	}
	if n < len(segs) && (segs[n].vlog || now.Sub(segs[n].seen) >= s.trimSyncAfter) {
		ok, err := s.syncBadger()
		if err != nil {
			return err
		}
		if ok {
			n = len(segs)
		}
	}
	if n == 0 {
		return nil
	}
	// The held entries those segments put and Badger does not hold yet
	// go to Badger first (durable in a later segment).
	if err := s.promoteHeld(s.clog.lastSeq(segs[n-1])); err != nil {
		if errors.Is(err, errHeldPending) {
			return nil // a deletion in flight: the next pass
		}
		return err
	}
	return s.removeSegments(segs[:n])
}

// lastSeq is the last batch of sg, a segment with a successor.
func (l *commitLog) lastSeq(sg segment) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i+1 < len(l.segs); i++ {
		if l.segs[i].path == sg.path {
			return l.segs[i+1].first - 1
		}
	}
	return ^uint64(0) // not found (never so): promote everything
}

// trimSyncAfter: how long a commit log segment waits for Badger's
// memtable flushes before truncateCommitLog syncs Badger's logs instead.
const trimSyncAfter = time.Minute

// removeSegments removes segs (the oldest segments) from the disk.
func (s *BadgerStore) removeSegments(segs []segment) error {
	if len(segs) == 0 {
		return nil
	}
	for _, sg := range segs {
		if err := os.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("state: remove commit log segment: %w", err)
		}
	}
	s.clog.removed(segs)
	return nil
}

// syncBadger syncs Badger's active memtable log and value log and
// reports whether that made everything Badger holds durable: no older
// memtable (whose log is not synced) waits for its flush.
func (s *BadgerStore) syncBadger() (bool, error) {
	if err := s.db.Sync(); err != nil {
		return false, fmt.Errorf("state: sync badger: %w", err)
	}
	n, err := countMemLogs(s.path)
	return n <= 1, err
}

// syncBadgerAll is syncBadger, waiting (up to a minute) for the older
// memtables to be flushed.
func (s *BadgerStore) syncBadgerAll() error {
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := s.syncBadger()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("state: badger did not flush its memtables within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memLogs are the file numbers of Badger's memtable logs in a directory:
// the oldest and the newest (oldest is MaxUint64 when there are none).
type memLogs struct{ oldest, newest uint64 }

func memLogFids(dir string) (memLogs, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return memLogs{}, fmt.Errorf("state: read store directory: %w", err)
	}
	m := memLogs{oldest: math.MaxUint64}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".mem")
		if !ok {
			continue
		}
		fid, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			// Not one of Badger's: never assume it flushed.
			return memLogs{}, fmt.Errorf("state: unexpected memtable log %q in the store directory", e.Name())
		}
		m.oldest, m.newest = min(m.oldest, fid), max(m.newest, fid)
	}
	return m, nil
}

func countMemLogs(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("state: read store directory: %w", err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".mem") {
			n++
		}
	}
	return n, nil
}

// replayInto replays the commit log of dir into db (whatever
// BadgerOptions.NoCommitLog says: a log left by a run with it must be
// applied) and adds what it found lost to ds, for settle.
func replayInto(db *badger.DB, dir string, ds *dirState, force bool, log *slog.Logger) error {
	ms, err := readMarks(db)
	if err != nil {
		return err
	}
	res, err := replayCommitLog(db, dir, ms.commits, force)
	if err != nil {
		return err
	}
	ds.damage = append(ds.damage, res.damage...)
	ds.logLost = res.lost
	if res.batches > 0 {
		log.Info("state: commit log replayed", "path", dir, "batches", res.batches, "last_commit", res.last, "badger_had", ms.commits)
	}
	if res.ahead {
		return repairAhead(db, res, ms.commits, log)
	}
	return nil
}

// repairAhead mends what the batches Badger held and the commit log lost
// (replayResult.ahead; never acknowledged) left without their held
// writes: a record created Sent without its entry in the Sent index,
// which the recovery at start-up would never make unknown (every retry
// of its key then waited and got 0x58 until the record expired), and a
// receipt's dedup marker without its queue entry, against which the
// SMSC's redelivery of that receipt was taken for a duplicate and the
// receipt lost (from review). The index is built again from the records
// (ensureSentIndex, at open), and the markers of queue sequence numbers
// given after the log's last batch whose entry is missing are deleted.
func repairAhead(db *badger.DB, res replayResult, badgerHad uint64, log *slog.Logger) error {
	markers := 0
	err := db.Update(func(txn *badger.Txn) error {
		if err := txn.Delete([]byte(keySentIndex)); err != nil {
			return err
		}
		if !res.hasQ {
			return nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixDedup)})
		defer it.Close()
		var drop [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			var m dedupMarker
			if err := it.Item().Value(func(v []byte) (err error) { m, err = decodeMarker(v); return err }); err != nil || m.seq <= res.qseq {
				continue
			}
			k := it.Item().KeyCopy(nil)
			queue, ok := markerQueuePrefix(k)
			if !ok {
				continue
			}
			if _, err := txn.Get(binary.BigEndian.AppendUint64(queue, m.seq)); errors.Is(err, badger.ErrKeyNotFound) {
				drop = append(drop, k)
			} else if err != nil {
				return err
			}
		}
		for _, k := range drop {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		markers = len(drop)
		return nil
	})
	if err != nil {
		return fmt.Errorf("state: mend the commits the commit log lost: %w", err)
	}
	log.Warn("state: the store held commits its commit log lost (a power loss between the two, before they were acknowledged): the index of sent records is built again, and receipts' duplicate markers without their queued receipt are deleted so that the SMSC's redelivery is taken",
		"log_last_commit", res.last, "badger_had", badgerHad, "markers_deleted", markers, "queue_seq_known", res.hasQ)
	return nil
}

// markerQueuePrefix returns the queuePrefix of the queue of dedupKey k.
func markerQueuePrefix(k []byte) ([]byte, bool) {
	rest := k[len(prefixDedup):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return nil, false
	}
	q := make([]byte, 0, len(prefixQueue)+i+9)
	q = append(q, prefixQueue...)
	return append(q, rest[:i+1]...), true
}

// startCommitLog runs at open, once the replayed store has been found
// whole: it makes everything Badger holds durable, removes the replayed
// segments and, unless NoCommitLog, starts a new one for the next commit
// (valueThreshold: Badger's; a batch holding a value that long is synced
// through Badger's value log too).
func (s *BadgerStore) startCommitLog(opts BadgerOptions, valueThreshold int64) error {
	if opts.InMemory {
		return nil
	}
	enabled := !opts.NoCommitLog
	segs, err := listSegments(s.path)
	if err != nil {
		return err
	}
	if !enabled && len(segs) == 0 {
		return nil
	}
	if err := s.syncBadgerAll(); err != nil {
		return err
	}
	for _, sg := range segs {
		if err := os.Remove(sg.path); err != nil {
			return fmt.Errorf("state: remove commit log segment: %w", err)
		}
	}
	if !enabled {
		return nil
	}
	if s.clog, err = openCommitLog(s.path, s.commitSeq+1, s.qseq, nil, max(opts.commitLogRotate, 0)); err != nil {
		return err
	}
	s.held = newHeldLog()
	if valueThreshold < math.MaxInt32 {
		s.clog.vlogAt = int(valueThreshold)
	}
	return nil
}

// closeDB writes the entries the commit log alone holds to Badger
// (heldlog.go), closes Badger (which flushes its memtables into
// synced tables) and then removes the commit log, which it no longer
// needs. If those entries cannot be written, the commit log is kept: the
// next open replays it.
func (s *BadgerStore) closeDB() error {
	// Badger unmaps its tables as it closes: no pass over their pages
	// may run then (tablepages.go).
	s.stopPages()
	if s.clog != nil {
		if err := s.flushHeldAtClose(); err != nil {
			// The commit log stays: the next open replays it.
			s.log.Error("state: entries the commit log alone held (sent records, queued receipts) not written at close; the commit log is kept", "err", err)
			_ = s.clog.close()
			return errors.Join(err, s.db.Close())
		}
		if _, err := s.syncBadger(); err != nil {
			s.log.Error("state: sync at close", "err", err)
		}
		_ = s.clog.close()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("state: close badger: %w", err)
	}
	if s.clog == nil {
		return nil
	}
	s.clog.mu.Lock()
	segs := s.clog.segs
	s.clog.mu.Unlock()
	for _, sg := range segs {
		if err := os.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("state: remove commit log segment: %w", err)
		}
	}
	return nil
}
