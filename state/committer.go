package state

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// request is one Create or Update waiting for the committer. The caller
// fills the input fields; the committer fills the staging and outcome
// fields and then closes done, which publishes them to the caller.
type request struct {
	key []byte // record key

	// Create: the encoded record, its Expires and its index keys. Update
	// fills them from fn's result.
	val     []byte
	expires time.Time
	idx     [][]byte

	fn func(*Record) error // Update only

	// op, when set, replaces the record logic: it reads through the stager
	// and stages its own writes (queue operations).
	op func(st *stager, r *request)

	writes []write // staged by the committer

	res     *Record
	created bool
	seq     uint64 // queue operations: the entry's sequence number
	dup     bool   // Enqueue: a live dedup marker was found
	err     error
	done    chan struct{}
}

// write is one staged key mutation.
type write struct {
	key, val  []byte
	expiresAt uint64 // Badger TTL, Unix seconds; 0 = none
	del       bool
}

// commitLoop is the committer: it takes the requests that are waiting (at
// least one, at most maxBatch) and runs them as one batch. Requests that
// arrive while a batch is being synced form the next batch, which is what
// makes the batches grow with the load. It returns when Close has closed
// s.reqs and every request in it has been answered.
func (s *BadgerStore) commitLoop() {
	defer close(s.committerDone)
	batch := make([]*request, 0, s.maxBatch)
	for r := range s.reqs {
		batch = append(batch[:0], r)
	fill:
		for len(batch) < s.maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.runBatch(batch)
		clear(batch)
	}
}

// runBatch applies every request of the batch in order against one read
// snapshot plus the writes staged so far, then commits the staged writes.
func (s *BadgerStore) runBatch(batch []*request) {
	s.ops.Add(uint64(len(batch)))
	if err := s.checkDisk(); err != nil {
		s.finish(batch, err)
		return
	}
	st := stager{
		txn:     s.db.NewTransaction(false),
		overlay: make(map[string]write, 3*len(batch)),
		now:     s.now(),
		wall:    time.Now(),
		qseq:    &s.qseq,
	}
	for _, r := range batch {
		st.apply(r)
	}
	st.txn.Discard()
	s.commitStaged(batch)
	if fn := s.commitObserver.Load(); fn != nil {
		(*fn)(len(batch), time.Since(st.wall))
	}
}

// SetCommitObserver installs fn, called after every group commit with the
// number of write requests it carried and how long the batch took (apply,
// commit and fsync). fn runs on the committer goroutine: keep it short.
func (s *BadgerStore) SetCommitObserver(fn func(ops int, took time.Duration)) {
	s.commitObserver.Store(&fn)
}

// checkDisk is the free-space guard (BadgerOptions.MinFreeBytes). It logs
// when the verdict changes, not on every refused batch.
func (s *BadgerStore) checkDisk() error {
	if s.minFree <= 0 {
		return nil
	}
	free, ok := s.diskFree(s.path)
	low := ok && free < uint64(s.minFree)
	if low != s.lowDisk {
		s.lowDisk = low
		if low {
			s.log.Error("state: disk nearly full, refusing writes", "path", s.path, "free_bytes", free, "min_free_bytes", s.minFree)
		} else {
			s.log.Info("state: disk space back, accepting writes", "path", s.path, "free_bytes", free)
		}
	}
	if low {
		return fmt.Errorf("%w: %d MiB free on %s, %d MiB required", ErrDiskFull, free>>20, s.path, s.minFree>>20)
	}
	return nil
}

// stager decides the outcome of each request of a batch and stages its
// writes. Reads see the snapshot taken at the start of the batch (every
// earlier batch is committed by then: the committer is the only writer)
// overlaid with the writes staged by earlier requests of this batch.
type stager struct {
	txn     *badger.Txn // read-only snapshot
	overlay map[string]write
	now     time.Time // the store's clock: decides expiry
	wall    time.Time // real time: Badger's TTL is measured against it
	qseq    *uint64   // the store's last queue sequence number (committer only)
}

func (st *stager) apply(r *request) {
	if r.op != nil {
		r.op(st, r)
		return
	}
	old, err := st.record(r.key)
	if err != nil {
		r.err = err
		return
	}
	live := old != nil && !old.Expired(st.now)
	if r.fn == nil { // Create
		if live {
			r.res = old
			return
		}
	} else { // Update
		if !live {
			r.err = ErrNotFound
			return
		}
		next, err := runUpdate(old, r.fn)
		if err != nil {
			r.res, r.err = old, err
			return
		}
		r.val = encodeRecord(nil, next)
		r.expires = next.Expires
		r.idx = indexKeys(next)
		if r.res, err = decodeRecord(r.val); err != nil {
			r.err = err
			return
		}
	}
	// Index entries of the previous record that the new one no longer
	// has, and that still point at this record, are deleted.
	var stale [][]byte
	for _, ik := range indexKeys(old) {
		if slices.ContainsFunc(r.idx, func(k []byte) bool { return bytes.Equal(k, ik) }) {
			continue
		}
		same, err := st.index(ik, r.key)
		if err != nil {
			r.res, r.err = nil, err
			return
		}
		if same {
			stale = append(stale, ik)
		}
	}
	exp := st.expiresAt(r.expires)
	st.stage(r, write{key: r.key, val: r.val, expiresAt: exp})
	for _, ik := range r.idx {
		st.stage(r, write{key: ik, val: r.key, expiresAt: exp})
	}
	for _, ik := range stale {
		st.stage(r, write{key: ik, del: true})
	}
	r.created = r.fn == nil
}

func (st *stager) stage(r *request, w write) {
	r.writes = append(r.writes, w)
	st.overlay[string(w.key)] = w
}

// record returns the record under key as this batch sees it (expired or
// not), or nil.
func (st *stager) record(key []byte) (*Record, error) {
	if w, ok := st.overlay[string(key)]; ok {
		if w.del {
			return nil, nil
		}
		return decodeRecord(w.val)
	}
	return readRecord(st.txn, key)
}

// get returns the value under key as this batch sees it, or found=false.
// The value may alias the overlay: do not modify it.
func (st *stager) get(key []byte) (val []byte, found bool, err error) {
	if w, ok := st.overlay[string(key)]; ok {
		if w.del {
			return nil, false, nil
		}
		return w.val, true, nil
	}
	item, err := st.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: read %q: %w", key, err)
	}
	val, err = item.ValueCopy(nil)
	if err != nil {
		return nil, false, fmt.Errorf("state: read %q: %w", key, err)
	}
	return val, true, nil
}

// index reports whether index entry ik points at record key rk as this
// batch sees it.
func (st *stager) index(ik, rk []byte) (bool, error) {
	if w, ok := st.overlay[string(ik)]; ok {
		return !w.del && bytes.Equal(w.val, rk), nil
	}
	return readIndex(st.txn, ik, rk)
}

// expiresAt converts a record's Expires into Badger's TTL: real time now
// plus the time left by the store's clock, rounded up, at least a second.
func (st *stager) expiresAt(expires time.Time) uint64 {
	if expires.IsZero() {
		return 0
	}
	left := max(expires.Sub(st.now), time.Second)
	return uint64(st.wall.Add(left).Unix()) + 1
}

// commitStaged writes the staged writes of the batch in one transaction
// and releases the waiters. A batch too big for one Badger transaction is
// split: the requests that fit are committed (and released) first and the
// rest goes on in a new transaction. When a commit fails, every request
// not yet committed fails with that error: later requests may have seen
// the failed writes.
func (s *BadgerStore) commitStaged(batch []*request) {
	txn := s.writeTxn()
	defer func() { txn.Discard() }()
	pending := 0 // writes set in txn
	start := 0   // first request not yet committed
	for i, r := range batch {
		if len(r.writes) == 0 {
			continue
		}
		err := setWrites(txn, r.writes)
		if errors.Is(err, badger.ErrTxnTooBig) && pending > 0 {
			// txn may hold part of r's writes: rebuild it without r.
			txn.Discard()
			txn = s.writeTxn()
			if err = setAll(txn, batch[start:i]); err == nil {
				err = s.commit(txn)
			}
			if err != nil {
				s.finish(batch[start:], err)
				return
			}
			s.finish(batch[start:i], nil)
			start, pending = i, 0
			txn = s.writeTxn()
			err = setWrites(txn, r.writes)
		}
		if err != nil {
			s.finish(batch[start:], fmt.Errorf("state: write: %w", err))
			return
		}
		pending += len(r.writes)
	}
	var err error
	if pending > 0 {
		err = s.commit(txn)
	}
	s.finish(batch[start:], err)
}

// commit commits txn (one fsync) and counts it.
func (s *BadgerStore) commit(txn *badger.Txn) error {
	if err := txn.Commit(); err != nil {
		s.log.Error("state: commit failed", "err", err)
		return fmt.Errorf("state: commit: %w", err)
	}
	s.commits.Add(1)
	s.committedNow()
	return nil
}

func setAll(txn *badger.Txn, reqs []*request) error {
	for _, r := range reqs {
		if err := setWrites(txn, r.writes); err != nil {
			return err
		}
	}
	return nil
}

func setWrites(txn *badger.Txn, ws []write) error {
	for _, w := range ws {
		var err error
		if w.del {
			err = txn.Delete(w.key)
		} else {
			e := badger.NewEntry(w.key, w.val)
			e.ExpiresAt = w.expiresAt
			err = txn.SetEntry(e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// finish releases the waiters of reqs; with err != nil each of them fails
// with it, whatever the batch had decided.
func (s *BadgerStore) finish(reqs []*request, err error) {
	if err != nil {
		s.failed.Add(uint64(len(reqs)))
	}
	for _, r := range reqs {
		if err != nil {
			r.res, r.created, r.seq, r.dup, r.err = nil, false, 0, false, err
		}
		r.writes = nil
		close(r.done)
	}
}
