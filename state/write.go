package state

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// How BadgerStore writes a record (Create, Update, Replace):
//
//  1. The caller takes the lock of the record's key (one of nStripes
//     mutexes, by hash) and keeps it until its write is durable (or has
//     failed), so no other write of that record can be decided meanwhile.
//  2. It reads the record from the store's snapshot: a read transaction
//     the committer renews after every commit, before releasing that
//     commit's waiters, so it holds every write that has returned (and
//     reading it never waits for a sync in progress).
//  3. It decides (Update's fn runs here, in the caller's goroutine), and
//     encodes the writes: the record (version 5: with its history while
//     that is short, else with its first event), the index entries it
//     gains, the events it appends to its history log once the history is
//     no longer kept with the record, its entry in the index of Sent
//     records.
//  4. The committer only gathers such ready writes into one transaction
//     per sync (committer.go), and resolves the two kinds of write that
//     depend on other records: the deletion of an index entry the record
//     no longer has (only if it still points at this record) and the
//     queue operations.

// nStripes is the number of record-key locks.
const nStripes = 4096

// snapshot is a read-only transaction shared by the readers; the last
// release discards it.
type snapshot struct {
	txn  *badger.Txn
	refs atomic.Int64
}

// acquire returns the current snapshot; release it when done.
func (s *BadgerStore) acquire() *snapshot {
	s.snapMu.RLock()
	sn := s.snap
	sn.refs.Add(1)
	s.snapMu.RUnlock()
	return sn
}

func (sn *snapshot) release() {
	if sn.refs.Add(-1) == 0 {
		sn.txn.Discard()
	}
}

// refreshSnapshot replaces the snapshot by a new one (committer; at open).
func (s *BadgerStore) refreshSnapshot() {
	sn := &snapshot{txn: s.db.NewTransaction(false)}
	sn.refs.Store(1)
	s.snapMu.Lock()
	old := s.snap
	s.snap = sn
	s.snapMu.Unlock()
	if old != nil {
		old.release()
	}
}

// lockKey locks the record key rk against other writers.
func (s *BadgerStore) lockKey(rk []byte) *sync.Mutex {
	mu := &s.stripes[maphash.Bytes(s.seed, rk)%nStripes]
	mu.Lock()
	return mu
}

// loadRecord reads the record under rk from txn, expired or not (nil when
// absent), with the number of events logged and whether it is of version
// 4 or 5 (hot). A hot record comes with the events kept with it; with
// history, with every event kept.
func loadRecord(txn *badger.Txn, rk []byte, history bool) (rec *Record, histN uint32, hot bool, err error) {
	item, err := txn.Get(rk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("state: read %q: %w", rk, err)
	}
	err = item.Value(func(v []byte) (err error) {
		rec, histN, hot, err = decodeStored(v)
		return err
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("state: read %q: %w", rk, err)
	}
	if history && hot && histN > uint32(len(rec.History)) {
		if rec.History, err = loadHistory(txn, rk, histN, rec.History); err != nil {
			return nil, 0, false, err
		}
	}
	return rec, histN, hot, nil
}

// loadLatest is loadRecord from the store's snapshot sn, or, when the row
// cache has the record, from there (then possibly newer than sn, never
// older); a key the filter of keys held says absent is absent (nil)
// without a lookup. A record whose history is (partly) in the log, read
// with its history, is read from sn alone, so that the record and its log
// agree.
func (s *BadgerStore) loadLatest(sn *snapshot, rk []byte, history bool) (rec *Record, histN uint32, hot bool, err error) {
	if !s.keys.mayHold(rk) {
		return nil, 0, false, nil
	}
	if rec, histN, hot, ok := s.cachedRecord(rk, history); ok {
		return rec, histN, hot, nil
	}
	if s.onRecordLookup != nil {
		s.onRecordLookup()
	}
	return loadRecord(sn.txn, rk, history)
}

// cachedRecord returns the record under rk from the row cache, as
// loadRecord would, if the cache has it whole (with history: one whose
// history is kept with it).
func (s *BadgerStore) cachedRecord(rk []byte, history bool) (rec *Record, histN uint32, hot, ok bool) {
	v, ok := s.rows.get(rk)
	if !ok {
		return nil, 0, false, false
	}
	rec, histN, hot, err := decodeStored(v)
	if err != nil || (history && hot && histN > uint32(len(rec.History))) {
		return nil, 0, false, false
	}
	return rec, histN, hot, true
}

// loadHistory reads the events kept of the n logged for the record under
// rk, after first (the events kept with the record: those of sequence
// numbers 0 to len(first)-1). An event missing (dropped by TTL) is left
// out.
func loadHistory(txn *badger.Txn, rk []byte, n uint32, first []Event) ([]Event, error) {
	out := make([]Event, 0, min(n, MaxHistory))
	out = append(out, first...)
	// The events kept are the first and the latest MaxHistory-1; the log
	// holds those the record does not.
	for q := uint32(max(1, int64(len(first)), int64(n)-MaxHistory+1)); q < n; q++ {
		item, err := txn.Get(histKey(rk, q))
		if errors.Is(err, badger.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("state: read history of %q: %w", rk, err)
		}
		var e Event
		err = item.Value(func(v []byte) (err error) {
			e, err = decodeEvent(v)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("state: read history of %q: %w", rk, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// clock is the pair of times a write is decided at.
type clock struct{ now, wall time.Time }

func (s *BadgerStore) clock() clock { return clock{now: s.now(), wall: time.Now()} }

// later reports whether TTL a ends after TTL b (0 is never).
func later(a, b uint64) bool { return b != 0 && (a == 0 || a > b) }

// maxInline is the most history events a record keeps with itself. A
// submit's usual history (forwarded, answered, a receipt or two) fits, so
// none of its writes needs a key of the history log.
const maxInline = 4

// plan decides the writes that store next over cur (the record stored
// under the key rk, or nil; curN: its events logged). full writes every key
// of next (a new record, or one of an older version): its whole history
// from the start, every index entry. Otherwise only what changed is
// written: the events next has beyond cur's, the index entries it gains
// (all of them, and the history again, when its TTL grows). It returns the
// writes and the history as stored (capped).
//
// A history of at most maxInline events is kept whole with the record (it
// is rewritten with it anyway) and needs no key of the log; a longer one
// keeps its first event with the record and the others in the log (from
// sequence number 1 on). The form is decided at every write from the
// history next has, when the writer holds cur's whole history (it has
// curN events: a short one always comes whole with the record; Update and
// Replace hold it whole); a writer that holds only the start of a longer
// history (AppendHot on the log's form) appends to the log. Moving to the
// log writes every event of it (some may be there already, from a record
// of an older version: the same keys again); keys of the log left behind
// by a history now kept with the record are never read (the record keeps
// the events below its number of events kept, the log those from there
// on) and expire by their TTL.
func plan(rk []byte, cur *Record, curN uint32, next *Record, full bool, c clock) ([]write, []Event) {
	exp := ttl(c.now, c.wall, next.Expires)
	grows := full || cur == nil || later(exp, ttl(c.now, c.wall, cur.Expires))
	ws := make([]write, 0, 6)
	var (
		view    []Event // the history as stored after this write
		n       uint32  // events logged after this write
		written int     // view's events (from the end) written already
		inline  bool    // view is kept whole with the record
	)
	added, rewrite := []Event(nil), full || cur == nil || len(cur.History) == 0
	if !rewrite {
		added, rewrite = historyDelta(cur.History, next.History)
	}
	whole := !rewrite && uint32(len(cur.History)) == curN && curN <= maxInline
	switch {
	case rewrite, whole:
		if rewrite {
			view = CapHistory(next.History)
			n = uint32(len(view))
		} else {
			view = CapHistory(append(cur.History[:len(cur.History):len(cur.History)], added...))
			n = curN + uint32(len(added))
		}
		written = len(view)
		if inline = len(view) <= maxInline && n == uint32(len(view)); inline {
			break
		}
		// The log holds every event but the first: view[i] is event
		// n-len(view)+i (view[0] is event 0, kept with the record).
		for i := 1; i < len(view); i++ {
			q := n - uint32(len(view)) + uint32(i)
			ws = append(ws, write{key: histKey(rk, q), val: encodeEvent(make([]byte, 0, eventSize(&view[i])), &view[i]), expiresAt: exp})
		}
	default:
		n = curN
		for i := range added {
			ws = append(ws, write{key: histKey(rk, n), val: encodeEvent(make([]byte, 0, eventSize(&added[i])), &added[i]), expiresAt: exp})
			if n >= MaxHistory {
				ws = append(ws, write{key: histKey(rk, n-MaxHistory+1), del: true})
			}
			n++
		}
		view = CapHistory(append(cur.History[:len(cur.History):len(cur.History)], added...))
		written = min(len(added), max(len(view)-1, 0)) // view[0] is old's
	}
	if grows && written < len(view) {
		// The events logged before keep their TTL: give them the new one.
		for i := 1; i < len(view)-written; i++ { // view[0] is kept with the record
			q := n - uint32(len(view)) + uint32(i)
			ws = append(ws, write{key: histKey(rk, q), val: encodeEvent(make([]byte, 0, eventSize(&view[i])), &view[i]), expiresAt: exp})
		}
	}
	ws = appendIndexWrites(ws, cur, next, rk, exp, grows)
	hot := *next
	if inline {
		hot.History = view
	} else {
		hot.History = view[:min(len(view), 1)]
	}
	ws = append(ws, write{key: rk, val: encodeHot(make([]byte, 0, hotSize(&hot)), &hot, n), expiresAt: exp})
	return ws, view
}

// appendIndexWrites appends the index writes of storing next over cur:
// the entries next gains (all of them when grows), the conditional
// deletion of those it loses, and its entry in the Sent index.
func appendIndexWrites(ws []write, cur, next *Record, rk []byte, exp uint64, grows bool) []write {
	newIdx, oldIdx := indexKeys(next), indexKeys(cur)
	has := func(ks [][]byte, k []byte) bool {
		return slices.ContainsFunc(ks, func(x []byte) bool { return string(x) == string(k) })
	}
	for _, ik := range newIdx {
		if grows || !has(oldIdx, ik) {
			ws = append(ws, write{key: ik, val: rk, expiresAt: exp, shared: true})
		}
	}
	for _, ik := range oldIdx {
		if !has(newIdx, ik) {
			ws = append(ws, write{key: ik, val: rk, cond: true})
		}
	}
	wasSent := cur != nil && cur.State == Sent
	switch {
	case next.State == Sent && (grows || !wasSent):
		ws = append(ws, write{key: sentKey(rk), expiresAt: exp, reput: wasSent})
	case next.State != Sent && wasSent:
		ws = append(ws, write{key: sentKey(rk), del: true})
	}
	return ws
}

// normalised returns a copy of r (without history) with its times as the
// codec returns them: UTC, no monotonic reading.
func normalised(r *Record) *Record {
	c := *r
	c.History = nil
	c.Created, c.Updated, c.Expires, c.DeliveryAt = normTime(c.Created), normTime(c.Updated), normTime(c.Expires), normTime(c.DeliveryAt)
	return &c
}

func normalisedEvents(h []Event) []Event {
	if len(h) == 0 {
		return nil
	}
	out := make([]Event, len(h))
	for i, e := range h {
		e.At = normTime(e.At)
		out[i] = e
	}
	return out
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// write hands r's writes to the committer and waits for the outcome. The
// caller has entered; write exits.
func (s *BadgerStore) write(ctx context.Context, ws []write) error {
	if err := checkKeys(ws); err != nil {
		s.exit()
		return err
	}
	r := &request{writes: ws, done: make(chan struct{})}
	select {
	case s.reqs <- r:
		s.exit()
	case <-ctx.Done():
		s.exit()
		return fmt.Errorf("state: %w", ctx.Err())
	}
	<-r.done // deliberately not ctx: see the type's comment
	return r.err
}

// Create implements Store. On created=true, existing is nil.
func (s *BadgerStore) Create(ctx context.Context, rec *Record) (*Record, bool, error) {
	if rec == nil {
		return nil, false, errNilRecord
	}
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	rk := recordKey(rec.Key)
	defer s.lockKey(rk).Unlock()
	c := s.clock()
	sn := s.acquire()
	cur, _, _, err := s.loadLatest(sn, rk, false)
	if err == nil && cur != nil && !cur.Expired(c.now) {
		cur, _, _, err = s.loadLatest(sn, rk, true)
		sn.release()
		s.exit()
		if err != nil {
			return nil, false, err
		}
		return cur, false, nil
	}
	sn.release()
	if err != nil {
		s.exit()
		return nil, false, err
	}
	ws, _ := plan(rk, cur, 0, rec, true, c)
	if err := s.write(ctx, ws); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// readLive reads the record under rk from the snapshot, as loadRecord,
// and ErrNotFound when there is none live at c.
func (s *BadgerStore) readLive(rk []byte, history bool, c clock) (rec *Record, histN uint32, hot bool, err error) {
	sn := s.acquire()
	rec, histN, hot, err = s.loadLatest(sn, rk, history)
	sn.release()
	if err == nil && (rec == nil || rec.Expired(c.now)) {
		err = ErrNotFound
	}
	return rec, histN, hot, err
}

// Update implements Store. fn runs in the caller's goroutine while the
// record's key lock is held against other writers: it must be quick and
// must not write to the Store (that may deadlock).
func (s *BadgerStore) Update(ctx context.Context, k Key, fn func(*Record) error) (*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	rk := recordKey(k)
	defer s.lockKey(rk).Unlock()
	c := s.clock()
	cur, curN, hot, err := s.readLive(rk, true, c)
	if err != nil {
		s.exit()
		return nil, err
	}
	next, err := runUpdate(cur, fn)
	if err != nil {
		s.exit()
		return cur, err
	}
	ws, view := plan(rk, cur, curN, next, !hot, c)
	if err := s.write(ctx, ws); err != nil {
		return nil, err
	}
	stored := normalised(next)
	stored.History = normalisedEvents(view)
	return stored, nil
}

// errReplaceKey: Replace of two records of different keys.
var errReplaceKey = errors.New("state: Replace of a record by one of another key")

// Replace implements Store. It reads nothing, except for a record whose
// history old shows longer than maxInline: the number of events logged
// (the history may be capped) and the record's version (one of version 1
// to 3 is written whole).
func (s *BadgerStore) Replace(ctx context.Context, old, rec *Record) error {
	if old == nil || rec == nil {
		return errNilRecord
	}
	if old.Key != rec.Key {
		return fmt.Errorf("%w: %v, %v", errReplaceKey, old.Key, rec.Key)
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	rk := recordKey(rec.Key)
	defer s.lockKey(rk).Unlock()
	curN, full := uint32(len(old.History)), false
	if len(old.History) > maxInline {
		// A history this long may be capped (the number logged is then
		// the store's), or be a record of version 1 to 3, which has no
		// log: it is written whole.
		sn := s.acquire()
		cur, n, hot, err := s.loadLatest(sn, rk, false)
		sn.release()
		if err != nil {
			s.exit()
			return err
		}
		if cur != nil {
			curN, full = n, !hot
		}
	}
	ws, _ := plan(rk, old, curN, rec, full, s.clock())
	return s.write(ctx, ws)
}

// keySentIndex marks a store whose Sent index is complete: records of
// codec versions 1 to 3 were written without it, so the first open by
// this version builds it (one scan of every record) and then writes the
// mark.
const keySentIndex = "x/sentidx"

// ensureSentIndex builds the index of Sent records unless the store has
// it (see keySentIndex). It runs at open, before the committer starts.
func (s *BadgerStore) ensureSentIndex() error {
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(keySentIndex))
		found = err == nil
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil || found {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	c, n := s.clock(), 0
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 100, Prefix: []byte(prefixRecord)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec *Record
			if err := it.Item().Value(func(v []byte) (err error) {
				rec, err = decodeRecord(v)
				return err
			}); err != nil {
				return fmt.Errorf("state: build the index of sent records: %q: %w", it.Item().Key(), err)
			}
			if rec.State != Sent || rec.Expired(c.now) {
				continue
			}
			e := badger.NewEntry(sentKey(it.Item().KeyCopy(nil)), nil)
			e.ExpiresAt = ttl(c.now, c.wall, rec.Expires)
			if err := wb.SetEntry(e); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil {
		err = wb.Set([]byte(keySentIndex), []byte{1})
	}
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return fmt.Errorf("state: build the index of sent records: %w", err)
	}
	if n > 0 {
		s.log.Info("state: index of sent records built", "records", n)
	}
	return nil
}
