package state

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Queue operations of BadgerStore. Enqueue and Ack are write requests of
// the committer like Create and Update (group commit, arrival order): an
// Enqueue sees the dedup markers written by the requests before it, in
// the same batch too, and the sequence number is assigned by the
// committer, so it grows in commit order. The last number given is
// persisted under keyQueueSeq in the same transaction as the entry.

// loadQueueSeq reads the last queue sequence number at open.
func loadQueueSeq(db *badger.DB) (uint64, error) {
	var seq uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyQueueSeq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: queue sequence of %d bytes", errCorrupt, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("state: read queue sequence: %w", err)
	}
	return seq, nil
}

// Enqueue implements Queue.
func (s *BadgerStore) Enqueue(ctx context.Context, e *QueueEntry) (uint64, bool, error) {
	if e == nil {
		return 0, false, errNilEntry
	}
	proto := cloneEntry(e, 0)
	r := &request{done: make(chan struct{}), op: func(st *stager, r *request) { st.enqueue(r, proto) }}
	if err := s.submit(ctx, r); err != nil {
		return 0, false, err
	}
	return r.seq, r.dup, r.err
}

func (st *stager) enqueue(r *request, e *QueueEntry) {
	var mk []byte
	if e.DedupKey != "" {
		mk = dedupKey(e.Queue, e.DedupKey)
		if err := checkKey(mk); err != nil {
			r.err = err // this entry alone, not its batch
			return
		}
		v, found, err := st.get(mk)
		if err != nil {
			r.err = err
			return
		}
		if found {
			m, err := decodeMarker(v)
			if err != nil {
				r.err = err
				return
			}
			if m.live(st.now) {
				r.seq, r.dup = m.seq, true
				return
			}
		}
	}
	*st.qseq++
	seq := *st.qseq
	e.Seq = seq
	exp := st.expiresAt(e.Expires)
	st.stage(r, write{key: entryKey(e.Queue, seq), val: encodeEntry(nil, e), expiresAt: exp})
	if mk != nil {
		st.stage(r, write{key: mk, val: encodeMarker(seq, e.Expires), expiresAt: exp})
	}
	st.stage(r, write{key: []byte(keyQueueSeq), val: binary.BigEndian.AppendUint64(nil, seq)})
	r.seq = seq
}

// Ack implements Queue.
func (s *BadgerStore) Ack(ctx context.Context, queue string, seq uint64) error {
	key := entryKey(queue, seq)
	r := &request{done: make(chan struct{}), op: func(st *stager, r *request) {
		st.stage(r, write{key: key, del: true})
		r.seq = seq
	}}
	if err := s.submit(ctx, r); err != nil {
		return err
	}
	return r.err
}

// List implements Queue. The entries the held log keeps (heldlog.go) are
// read from it, the others from Badger, merged in sequence order; the
// held log is read first, so an entry it forgets meanwhile (written to
// Badger, or deleted) is listed once or, deleted, not at all.
func (s *BadgerStore) List(ctx context.Context, queue string, after uint64, limit int) ([]*QueueEntry, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if limit <= 0 || after == ^uint64(0) {
		return nil, nil
	}
	now := s.now()
	prefix := queuePrefix(queue)
	held := s.held.list(prefix, after, limit, now)
	var out []*QueueEntry
	for _, v := range held.live {
		e, err := decodeEntry(v)
		if err != nil {
			return nil, fmt.Errorf("state: held queue entry of %q: %w", queue, err)
		}
		out = append(out, e)
	}
	fromHeld := len(out)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: min(limit, 100), Prefix: prefix})
		defer it.Close()
		for it.Seek(entryKey(queue, after+1)); it.Valid() && len(out)-fromHeld < limit; it.Next() {
			_, seq := splitEntryKey(it.Item().Key())
			if held.bound != 0 && seq > held.bound {
				break // the held entries up to bound fill the listing
			}
			if holds(held.seqs, seq) {
				continue
			}
			e, err := itemEntry(it.Item())
			if err != nil {
				return err
			}
			if !e.Expired(now) {
				out = append(out, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if fromHeld > 0 && len(out) > fromHeld {
		slices.SortFunc(out, func(a, b *QueueEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return out[:min(len(out), limit)], nil
}

// Depths implements Queue.
func (s *BadgerStore) Depths(ctx context.Context) (map[string]int, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	now := s.now()
	out := map[string]int{}
	held, err := s.held.queueCounts(now)
	if err != nil {
		return nil, err
	}
	for _, c := range held {
		if c.live > 0 {
			out[c.queue] += c.live
		}
	}
	err = s.db.View(func(txn *badger.Txn) error {
		// Each entry's queue and expiry are read in place, the rest
		// (its PDU above all) passed over.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixQueue)})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%256 == 0 {
				if err := ctxErr(ctx); err != nil {
					return err
				}
			}
			item := it.Item()
			if k := item.Key(); len(held) > 0 && isQueueEntryKey(k) {
				qp, seq := splitEntryKey(k)
				if c, ok := held[string(qp)]; ok && holds(c.seqs, seq) {
					continue // counted from the held log
				}
			}
			err := item.Value(func(v []byte) error {
				q, exp, err := peekQueueExpires(v)
				if err == nil && !expiredAt(exp, now) {
					out[string(q)]++
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("state: queue entry %q: %w", item.Key(), err)
			}
		}
		return nil
	})
	return out, err
}

func itemEntry(item *badger.Item) (*QueueEntry, error) {
	var e *QueueEntry
	err := item.Value(func(v []byte) (err error) {
		e, err = decodeEntry(v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("state: queue entry %q: %w", item.Key(), err)
	}
	return e, nil
}

// ByProxyID implements Store.
func (s *BadgerStore) ByProxyID(ctx context.Context, account, id string) (*Record, error) {
	return s.byIndex(ctx, proxyIDKey(account, id), true, func(r *Record) bool {
		return hasProxyID(r, account, id)
	})
}

// UnknownByAddr implements Store.
func (s *BadgerStore) UnknownByAddr(ctx context.Context, upstream string, h [16]byte) ([]*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if h == ([16]byte{}) {
		return nil, nil
	}
	now := s.now()
	var out []*Record
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: unknownPrefix(upstream, h)})
		defer it.Close()
		var rks [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			rk, err := it.Item().ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("state: read unknown index: %w", err)
			}
			rks = append(rks, rk)
		}
		for i, rk := range rks {
			if i > 0 && bytes.Equal(rk, rks[i-1]) {
				continue
			}
			rec, _, _, err := loadRecord(txn, rk, true)
			if err != nil {
				return err
			}
			if rec != nil && !rec.Expired(now) && isUnknownAt(rec, upstream, h) {
				out = append(out, rec)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AckAll acknowledges the entries seqs of queue in one write request (one
// group commit): Ack of each, durable together.
func (s *BadgerStore) AckAll(ctx context.Context, queue string, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	keys := make([][]byte, len(seqs))
	for i, seq := range seqs {
		keys[i] = entryKey(queue, seq)
	}
	r := &request{done: make(chan struct{}), op: func(st *stager, r *request) {
		for _, k := range keys {
			st.stage(r, write{key: k, del: true})
		}
	}}
	if err := s.submit(ctx, r); err != nil {
		return err
	}
	return r.err
}

// ByMessageIDHot is ByMessageID without reading the record's history
// (Record.History is nil), as GetHot is Get: for the receipt intake, which
// needs the record's key, state and ids only.
func (s *BadgerStore) ByMessageIDHot(ctx context.Context, upstream, id string) (*Record, error) {
	rec, err := s.byIndex(ctx, messageKey(upstream, id), false, func(r *Record) bool {
		return hasMessage(r, upstream, id)
	})
	if err != nil {
		return nil, err
	}
	rec.History = nil // a record of an older version has it inline
	return rec, nil
}

// AppendHot is Update for a change that reads no history log and only
// appends events to the history: fn sees the record with the events kept
// with it (a short history whole, else its first event; all of it for a
// record of codec version 1 to 3) and may append events; the events it appends are logged after the stored
// ones, as Update would. It returns no record (nothing to copy). When fn
// does more with the history, or changes Expires (the events logged
// before would need the new TTL), AppendHot does what Update does.
func (s *BadgerStore) AppendHot(ctx context.Context, k Key, fn func(*Record) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	rk := recordKey(k)
	mu := s.lockKey(rk)
	c := s.clock()
	cur, curN, hot, err := s.readLive(rk, false, c)
	var next *Record
	if err == nil {
		next, err = runUpdate(cur, fn)
	}
	if err != nil {
		mu.Unlock()
		s.exit()
		return err
	}
	if !appendsOnly(cur, next, hot) {
		mu.Unlock()
		s.exit()
		_, err := s.Update(ctx, k, fn)
		return err
	}
	defer mu.Unlock()
	ws, _ := plan(rk, cur, curN, next, false, c)
	return s.write(ctx, ws)
}

// appendsOnly reports whether next, fn's change of cur (read without its
// history log: hot), is one AppendHot writes: events appended to the
// history, Expires unchanged (the events logged before would need the new
// TTL), on a record of the current form. Anything else is Update's.
func appendsOnly(cur, next *Record, hot bool) bool {
	_, rewrite := historyDelta(cur.History, next.History)
	return hot && !rewrite && next.Expires.Equal(cur.Expires)
}

// EnqueueAppend is Enqueue of e and, in the same write request (one
// transaction, one sync), AppendHot of record k with fn — made only when
// e is enqueued, not for a duplicate. appended reports whether the record
// was changed: not when it is gone, fn failed, or fn's change needs what
// AppendHot leaves to Update (the caller then updates it by itself if it
// still wants to); err is Enqueue's (the record's writes fail with it).
func (s *BadgerStore) EnqueueAppend(ctx context.Context, e *QueueEntry, k Key, fn func(*Record) error) (seq uint64, dup, appended bool, err error) {
	if e == nil {
		return 0, false, false, errNilEntry
	}
	if err := s.enter(ctx); err != nil {
		return 0, false, false, err
	}
	rk := recordKey(k)
	defer s.lockKey(rk).Unlock()
	c := s.clock()
	cur, curN, hot, rerr := s.readLive(rk, false, c)
	s.exit()
	var ws []write
	if rerr == nil && hot {
		if next, err := runUpdate(cur, fn); err == nil && appendsOnly(cur, next, hot) {
			ws, _ = plan(rk, cur, curN, next, false, c)
		}
	}
	proto := cloneEntry(e, 0)
	r := &request{done: make(chan struct{}), op: func(st *stager, r *request) {
		// The record's conditional deletions are resolved first: nothing
		// is staged when reading fails.
		rws, err := st.resolve(ws)
		if err == nil {
			err = checkKeys(rws)
		}
		if err != nil {
			r.err = err
			return
		}
		st.enqueue(r, proto)
		if r.err != nil || r.dup {
			return
		}
		for _, w := range rws {
			st.stage(r, w)
		}
	}}
	if err := s.submit(ctx, r); err != nil {
		return 0, false, false, err
	}
	if r.err != nil {
		return 0, false, false, r.err
	}
	return r.seq, r.dup, !r.dup && ws != nil, nil
}
