package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// request is one write waiting for the committer. Record writes (Create,
// Update, Replace) arrive decided and encoded by their caller (writes);
// queue operations arrive as op, which the committer runs against what the
// batches before it staged. The committer fills the outcome fields and
// then closes done, which publishes them to the caller.
type request struct {
	writes []write

	// op, when set, reads through the stager and stages its own writes
	// (queue operations).
	op func(st *stager, r *request)

	batch uint64 // the batch the request is in (committer only)

	seq  uint64 // queue operations: the entry's sequence number
	dup  bool   // Enqueue: a live dedup marker was found
	err  error
	done chan struct{}
}

// write is one key mutation. Its key and val belong to the store once
// submitted: the row cache keeps them as they are, so they are never
// modified or reused afterwards (but a promote write's val, which the
// committer sets to the held entry's own: heldLog.promoted).
type write struct {
	key, val  []byte
	expiresAt uint64 // Badger TTL, Unix seconds; 0 = none
	del       bool
	// cond: delete key only if it still holds val (an index entry that
	// may have been taken over by another record). The committer decides.
	cond bool
	// shared: other requests' decisions may read this key (index entries,
	// queue keys), so the committer keeps it in its overlay until durable.
	shared bool
	// promote: an entry the held log keeps, to be written to Badger now
	// if it is still held (heldlog.go); skip: the committer found it was
	// not, and writes it neither to Badger nor to the commit log.
	promote, skip bool
	// reput: a put of an entry the store held already (a Sent record's
	// index entry, its TTL grown), which may have reached Badger: the held
	// log's entry for it sends its deletion to Badger too.
	reput bool
}

// size is what the write weighs in a Badger transaction (its estimate
// plus a margin for the entry's header).
func (w *write) size() int64 { return int64(len(w.key)+len(w.val)) + 24 }

// batch is the group of requests committed in one Badger transaction.
type batch struct {
	id     uint64
	reqs   []*request
	count  int64     // writes
	bytes  int64     // their size
	first  time.Time // when its first request was taken
	shared []string  // overlay keys its requests staged
	// heldTaken: the keys of the held log it puts, deletes or promotes,
	// settled with its outcome (heldlog.go); heldSeq: its sequence number
	// when launched.
	heldTaken []string
	heldSeq   uint64
}

// commitLoop is the committer. It keeps at most one transaction in
// Badger's hands and meanwhile gathers the requests that arrive into the
// next batch, which it hands over as soon as the one before is durable: a
// batch holds everything that arrived while the one before was written
// and synced (up to MaxBatch requests and a size Badger accepts in one
// transaction), those that came while the committer itself synced the
// commit log included (drain); with a commit delay, a small batch may
// wait a little for more (gatherer). It returns when Close has closed
// s.reqs and every request in it has been answered.
func (s *BadgerStore) commitLoop() {
	defer close(s.committerDone)
	st := &stager{s: s, overlay: make(map[string]ovEntry), qseq: &s.qseq}
	open := st.newBatch()
	var inflight *batch
	done := make(chan error, 1)
	reqs := s.reqs
	g := newGatherer(s.commitDelay, time.Now)
	g.onHold = s.onCommitHold
	defer g.stop()
	for {
		if inflight == nil && len(open.reqs) > 0 && g.ready(len(open.reqs), reqs == nil || open.full(s)) {
			inflight, open = open, st.newBatch()
			s.launch(inflight, open, done)
			reqs = s.drain(st, open, reqs, g)
		}
		if reqs == nil && inflight == nil && len(open.reqs) == 0 {
			return
		}
		in := reqs
		if open.full(s) {
			in = nil
		}
		select {
		case r, ok := <-in:
			if !ok {
				reqs = nil
				continue
			}
			g.arrived()
			st.add(open, r)
		case <-g.wait():
			g.expired()
		case err := <-done:
			st.completed(inflight, open, err)
			inflight = nil
		}
	}
}

// drain takes into open, without waiting, the requests waiting in reqs
// (those that arrived while launch synced the commit log), so that the
// outcome of the batch in flight, which may be waiting already, does not
// hand over the next batch with only some of them. It returns reqs, or nil
// once it is closed.
func (s *BadgerStore) drain(st *stager, open *batch, reqs chan *request, g *gatherer) chan *request {
	for reqs != nil && !open.full(s) {
		select {
		case r, ok := <-reqs:
			if !ok {
				return nil
			}
			g.arrived()
			st.add(open, r)
		default:
			return reqs
		}
	}
	return reqs
}

// full reports whether b may take no more requests.
func (b *batch) full(s *BadgerStore) bool {
	return len(b.reqs) >= s.maxBatch || b.count >= s.batchCount || b.bytes >= s.batchBytes
}

// launch commits b and arranges for its outcome to arrive on done: with
// the commit log, b is written to the log, handed to Badger (CommitWith:
// Badger applies it on its own goroutines) and the log synced meanwhile
// (commitLogged); without it, Badger writes and syncs it on its own. A
// batch refused before that (a broken log, a full disk, writes Badger
// rejects) fails at once. A request that does not fit in the transaction
// goes back to next.
func (s *BadgerStore) launch(b *batch, next *batch, done chan<- error) {
	b.heldTaken, b.heldSeq = nil, s.commitSeq+1 // (a relaunch after a carry starts again)
	if err := s.clog.refusal(); err != nil {
		// The commit log's tail is unknown: nothing more is written, to
		// Badger either (a batch Badger took while its log write failed
		// would be read back although its writers were told it failed).
		done <- err
		return
	}
	if err := s.checkDisk(b.bytes); err != nil {
		done <- err
		return
	}
	txn := s.db.NewTransaction(true)
	seq := s.commitSeq + 1 // this batch's sequence number
	var hwm write
	qseq := s.batchQueueSeq(b)
	if s.mark != nil {
		hwm = write{key: []byte(keyHWM), val: encodeHWM(seq, time.Now(), qseq)}
		if err := txn.Set(hwm.key, hwm.val); err != nil {
			s.log.Error("state: high-water mark not staged", "err", err)
		}
	}
	es := s.newEntrySlab(b.reqs)
	for i, r := range b.reqs {
		err := s.setWrites(txn, r.writes, seq, &b.heldTaken, &es)
		if errors.Is(err, badger.ErrTxnTooBig) && i > 0 {
			// txn holds part of r's writes: rebuild it without r and
			// carry r and the rest over to the next batch.
			txn.Discard()
			s.held.settled(b.heldTaken, seq, false)
			s.carry(b, next, i)
			s.launch(b, next, done)
			return
		}
		if err != nil {
			txn.Discard()
			done <- fmt.Errorf("state: write: %w", err)
			return
		}
	}
	s.hwmQueueSeq = qseq
	if s.clog == nil {
		txn.CommitWith(func(err error) {
			if err != nil {
				err = fmt.Errorf("state: commit: %w", err)
			}
			done <- err
		})
		return
	}
	s.commitLogged(txn, seq, hwm, b.reqs, done)
}

// batchQueueSeq is the last queue sequence number given once batch b is
// committed: the highest its enqueues staged, or the batches' before it
// (a request carried over to the next batch counts there, as launch
// computes it again).
func (s *BadgerStore) batchQueueSeq(b *batch) uint64 {
	q := s.hwmQueueSeq
	for _, r := range b.reqs {
		for i := range r.writes {
			if w := &r.writes[i]; !w.del && len(w.val) == 8 && string(w.key) == keyQueueSeq {
				q = max(q, binary.BigEndian.Uint64(w.val))
			}
		}
	}
	return q
}

// commitLogged commits txn, batch seq of reqs (hwm: its high-water mark's
// write), with the commit log: the batch is written to the log, handed to
// Badger, which applies it (unsynced) on its own goroutines, and synced
// here, beside that apply and without handing the sync to another
// goroutine (whose wake-up, under load, took longer than the write).
// Whichever of the two ends last sends the batch's outcome on done
// (neither waits for the other: Badger may run the callback before
// CommitWith returns). A batch whose write to the log failed is not handed
// over; one whose sync failed was, and may survive (see BadgerStore).
func (s *BadgerStore) commitLogged(txn *badger.Txn, seq uint64, hwm write, reqs []*request, done chan<- error) {
	if err := s.clog.write(seq, hwm, reqs); err != nil {
		txn.Discard()
		done <- err
		return
	}
	var (
		left       atomic.Int32
		lerr, berr error
	)
	left.Store(2)
	end := func() {
		if left.Add(-1) != 0 {
			return
		}
		if berr != nil {
			berr = fmt.Errorf("state: commit: %w", berr)
			if lerr == nil {
				// The log holds a batch Badger refused: the next batch
				// must not reuse its sequence number, and what Badger
				// holds is in doubt. No more writes until reopened (the
				// replay then applies it: a failed write may survive).
				s.clog.setBroken(fmt.Errorf("%w (the store refuses writes until it is reopened)", berr))
			}
		}
		if lerr != nil && berr == nil {
			done <- appliedError{lerr}
			return
		}
		done <- errors.Join(lerr, berr)
	}
	txn.CommitWith(func(err error) {
		berr = err
		end()
	})
	lerr = s.clog.sync(reqs)
	end()
}

// appliedError is the outcome of a batch Badger applied whose commit log
// sync failed (it reads as that failure).
type appliedError struct{ error }

func (e appliedError) Unwrap() error { return e.error }

// settleHeld settles what batch b did in the held log, err its outcome. A
// batch Badger applied whose log sync failed counts as applied: its
// writers were told it failed, and it may survive, as it would have in
// Badger alone. Its deletions are final (Badger would have applied them),
// and its puts are written to Badger now, with the rest of the batch (the
// log that holds them may not survive, and the store takes no more writes
// until it is reopened); one that cannot be is kept for Close.
func (s *BadgerStore) settleHeld(b *batch, err error) {
	applied := err == nil || errors.As(err, &appliedError{})
	var ws []write
	if err != nil && applied {
		ws = s.held.putsBy(b.heldTaken, b.heldSeq)
	}
	s.held.settled(b.heldTaken, b.heldSeq, applied)
	if len(ws) == 0 {
		return
	}
	if werr := applyBatch(s.db, ws); werr != nil {
		s.log.Error("state: entries of a batch whose log sync failed not written to the store; kept for close", "err", werr)
		return
	}
	s.held.forget(ws)
}

// carry moves b's requests from i on to the front of next.
func (s *BadgerStore) carry(b, next *batch, i int) {
	moved := b.reqs[i:]
	for _, r := range moved {
		r.batch = next.id
		for _, w := range r.writes {
			b.count -= 1
			b.bytes -= w.size()
			next.count++
			next.bytes += w.size()
			if w.shared {
				next.shared = append(next.shared, string(w.key))
			}
		}
	}
	next.reqs = append(append([]*request(nil), moved...), next.reqs...)
	b.reqs = b.reqs[:i:i]
}

// setWrites stages ws, writes of batch seq, in txn, but the entries the
// held log keeps (stageHeld; taken collects those it settles).
func (s *BadgerStore) setWrites(txn *badger.Txn, ws []write, seq uint64, taken *[]string, es *entrySlab) error {
	for i := range ws {
		if s.stageHeld(&ws[i], seq, taken) {
			continue
		}
		if err := es.set(txn, &ws[i]); err != nil {
			return err
		}
	}
	return nil
}

func setWrites(txn *badger.Txn, ws []write) error {
	var es entrySlab
	for i := range ws {
		if err := es.set(txn, &ws[i]); err != nil {
			return err
		}
	}
	return nil
}

// maxKeyLen is the longest key Badger takes.
const maxKeyLen = 65000

// ErrKeyTooLong refuses a write whose key Badger would refuse: in a group
// commit that refusal failed every request of the batch with it (a message
// id of tens of kilobytes from one upstream failed other accounts'
// writes), so such a write is refused alone, before the committer.
var ErrKeyTooLong = errors.New("state: a key is over Badger's limit of 65000 bytes")

// checkKeys returns ErrKeyTooLong when a key of ws is too long.
func checkKeys(ws []write) error {
	for i := range ws {
		if err := checkKey(ws[i].key); err != nil {
			return err
		}
	}
	return nil
}

// checkKey returns ErrKeyTooLong when k is too long (the error names its
// length and kind, never the key).
func checkKey(k []byte) error {
	if len(k) > maxKeyLen {
		return fmt.Errorf("%w (%d bytes, prefix %q)", ErrKeyTooLong, len(k), k[:2])
	}
	return nil
}

// entrySlab hands out the Badger entries of a batch from one allocation
// instead of one each (Badger keeps every entry until the batch is
// written, so the slab lives as long).
type entrySlab []badger.Entry

// newEntrySlab has room for the entries reqs set in Badger: not their
// deletions, nor the puts the held log keeps.
func (s *BadgerStore) newEntrySlab(reqs []*request) entrySlab {
	n := 0
	for _, r := range reqs {
		for i := range r.writes {
			w := &r.writes[i]
			if !w.del && (s.held == nil || w.promote || !isHeldKey(w.key)) {
				n++
			}
		}
	}
	return make(entrySlab, n)
}

// set stages w in txn.
func (es *entrySlab) set(txn *badger.Txn, w *write) error {
	if w.del {
		return txn.Delete(w.key)
	}
	if len(*es) == 0 {
		*es = make(entrySlab, 1)
	}
	e := &(*es)[0]
	*es = (*es)[1:]
	e.Key, e.Value, e.ExpiresAt = w.key, w.val, w.expiresAt
	return txn.SetEntry(e)
}

// SetCommitObserver installs fn, called after every group commit with the
// number of write requests it carried and how long the batch took (from
// its first request to durable). fn runs on the committer goroutine: keep
// it short.
func (s *BadgerStore) SetCommitObserver(fn func(ops int, took time.Duration)) {
	s.commitObserver.Store(&fn)
}

// diskCheckEvery is the longest time between two readings of the free
// space by checkDisk.
const diskCheckEvery = 250 * time.Millisecond

// checkDisk is the free-space guard (BadgerOptions.MinFreeBytes) for a
// batch of size bytes. It logs when the verdict changes, not on every
// refused batch. Free space is read (a statfs) at most every
// diskCheckEvery while the batches since the last reading are a small
// share of the room above the limit (1/64: what Badger writes for them,
// its logs and tables, and its compactions, is several times their size),
// and for every batch while the disk is low.
func (s *BadgerStore) checkDisk(size int64) error {
	if s.minFree <= 0 {
		return nil
	}
	now := time.Now()
	if !s.lowDisk && size < s.diskBudget && now.Sub(s.diskRead) < s.diskCheckEvery {
		s.diskBudget -= size
		return nil
	}
	s.diskRead = now
	free, ok := s.diskFree(s.path)
	low := ok && free < uint64(s.minFree)
	s.diskBudget = 0
	if ok && !low {
		s.diskBudget = int64(min(free-uint64(s.minFree), math.MaxInt64) / 64)
	}
	if low != s.lowDisk {
		s.lowDisk = low
		s.diskLow.Store(low)
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

// Writable returns the error the store refuses every write with once its
// commit log broke (a failed write or sync of the log, a batch Badger
// refused: until it is reopened), and ErrDiskFull while it refuses writes
// for want of free space (BadgerOptions.MinFreeBytes): the committer's
// last verdict, read again now when it was low, so that a disk freed
// while no write came is seen (readiness; nil otherwise).
func (s *BadgerStore) Writable() error {
	if err := s.clog.refusal(); err != nil {
		return err
	}
	if s.minFree <= 0 || !s.diskLow.Load() {
		return nil
	}
	if free, ok := s.diskFree(s.path); ok && free < uint64(s.minFree) {
		return fmt.Errorf("%w: %d MiB free on %s, %d MiB required", ErrDiskFull, free>>20, s.path, s.minFree>>20)
	}
	return nil
}

// stager is the committer's view of the store: the durable state (the
// store's snapshot, refreshed after every commit) overlaid with the
// shared writes (index entries, queue keys) of the batches that are not
// durable yet, so that a decision of the committer sees every write
// staged before it.
type stager struct {
	s       *BadgerStore
	overlay map[string]ovEntry
	nextID  uint64
	now     time.Time // the store's clock: decides expiry
	wall    time.Time // real time: Badger's TTL is measured against it
	qseq    *uint64   // the store's last queue sequence number (committer only)
}

// ovEntry is a write in the overlay and the request that staged it.
type ovEntry struct {
	w write
	r *request
}

func (st *stager) newBatch() *batch {
	st.nextID++
	return &batch{id: st.nextID}
}

// add takes r into b: it runs r's op, or resolves r's conditional deletes,
// and puts r's shared writes into the overlay.
func (st *stager) add(b *batch, r *request) {
	st.s.ops.Add(1)
	if len(b.reqs) == 0 {
		b.first = time.Now()
	}
	r.batch = b.id
	b.reqs = append(b.reqs, r)
	if r.op != nil {
		st.now, st.wall = st.s.now(), time.Now()
		r.op(st, r)
		if r.err != nil {
			r.writes = nil
		}
		for _, w := range r.writes {
			b.count++
			b.bytes += w.size()
			b.shared = append(b.shared, string(w.key))
		}
		return
	}
	ws, err := st.resolve(r.writes)
	if err != nil {
		r.err, r.writes = err, nil
		return
	}
	for _, w := range ws {
		if w.shared {
			st.overlay[string(w.key)] = ovEntry{w: w, r: r}
			b.shared = append(b.shared, string(w.key))
		}
		b.count++
		b.bytes += w.size()
	}
	r.writes = ws
}

// resolve decides ws's conditional deletions (in place): one whose index
// entry still points at its record becomes a deletion, the others are
// dropped.
func (st *stager) resolve(ws []write) ([]write, error) {
	out := ws[:0]
	for _, w := range ws {
		if w.cond {
			same, err := st.index(w.key, w.val)
			if err != nil {
				return nil, err
			}
			if !same {
				continue
			}
			w = write{key: w.key, del: true, shared: true}
		}
		out = append(out, w)
	}
	return out, nil
}

// stage adds w to r's writes and to the overlay (queue operations).
func (st *stager) stage(r *request, w write) {
	w.shared = true
	r.writes = append(r.writes, w)
	st.overlay[string(w.key)] = ovEntry{w: w, r: r}
}

// completed takes the outcome of b, the batch Badger had: it counts the
// commit, refreshes the snapshot, drops b's writes from the overlay and
// releases b's waiters. When b failed, next (being gathered, and possibly
// decided on b's writes) fails with it.
func (st *stager) completed(b, next *batch, err error) {
	s := st.s
	if err == nil {
		s.commits.Add(1)
		s.committedNow()
	} else {
		s.log.Error("state: commit failed", "err", err)
	}
	s.settleHeld(b, err)
	// Before the snapshot that shows the batch: the filter of record keys
	// and the row cache never lag a published snapshot.
	s.keys.add(b.reqs)
	s.rows.add(b.reqs, err)
	s.refreshSnapshot()
	st.forget(b)
	s.finish(b.reqs, err)
	if err != nil && len(next.reqs) > 0 {
		st.forget(next)
		if ae := (appliedError{}); errors.As(err, &ae) {
			err = ae.error // (next was not applied)
		}
		s.finish(next.reqs, err)
		*next = batch{id: next.id}
	}
	// Only commits that count in Stats().Commits are observed, so that the
	// commit histograms and smppproxy_store_commits_total agree.
	if fn := s.commitObserver.Load(); fn != nil && err == nil {
		(*fn)(len(b.reqs), time.Since(b.first))
	}
}

// forget drops b's writes from the overlay (those no later batch replaced).
func (st *stager) forget(b *batch) {
	for _, k := range b.shared {
		if e, ok := st.overlay[k]; ok && e.r.batch == b.id {
			delete(st.overlay, k)
		}
	}
}

// finish releases the waiters of reqs; with err != nil each of them fails
// with it, whatever the batch had decided.
func (s *BadgerStore) finish(reqs []*request, err error) {
	if err != nil {
		s.failed.Add(uint64(len(reqs)))
	}
	for _, r := range reqs {
		if err != nil {
			r.seq, r.dup, r.err = 0, false, err
		}
		r.writes = nil
		close(r.done)
	}
}

// get returns the value under key as the committer sees it, or
// found=false. The value may alias the overlay: do not modify it.
func (st *stager) get(key []byte) (val []byte, found bool, err error) {
	if e, ok := st.overlay[string(key)]; ok {
		if e.w.del {
			return nil, false, nil
		}
		return e.w.val, true, nil
	}
	if filtered(key) && !st.s.keys.mayHold(key) {
		return nil, false, nil // (the overlay holds what is not in it yet)
	}
	item, err := st.s.snap.txn.Get(key)
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

// index reports whether index entry ik points at record key rk as the
// committer sees it.
func (st *stager) index(ik, rk []byte) (bool, error) {
	v, found, err := st.get(ik)
	return found && bytes.Equal(v, rk), err
}

// expiresAt converts an Expires into Badger's TTL (see ttl).
func (st *stager) expiresAt(expires time.Time) uint64 {
	return ttl(st.now, st.wall, expires)
}

// ttl converts a record's Expires into Badger's TTL: real time wall plus
// the time left by the store's clock (now), rounded up, at least a second.
func ttl(now, wall, expires time.Time) uint64 {
	if expires.IsZero() {
		return 0
	}
	left := max(expires.Sub(now), time.Second)
	return uint64(wall.Add(left).Unix()) + 1
}
