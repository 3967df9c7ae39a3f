package state

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Some entries are short-lived: put, then deleted a few milliseconds
// later. With the commit log such an entry need never reach Badger: the
// commit log holds both writes, and a replay at open applies both. The
// committer writes them to the commit log only and keeps them in the held
// log, and the deletion of an entry still held goes to the commit log
// only too. Two kinds are held:
//
//   - The index of Sent records (sentKey), which serves ScanState(Sent)
//     (the engine's recovery at start-up): put when a submit's record is
//     created, before its PDU is sent, deleted at its outcome. A fresh
//     submit then makes 3 Badger entries instead of 5.
//   - Queue entries (entryKey): a receipt or an MO waiting for its ESME,
//     put at Enqueue and deleted at its Ack once delivered, which is
//     usually well under a second later. List and Depths read the held
//     entries beside Badger's; a held entry is listed once the batch that
//     put it is durable (Enqueue has returned), not as soon as Badger
//     applied it, so what a batch that fails put is never delivered.
//
// An entry still held must reach Badger before the commit log loses the
// batch that put it: before a segment is removed (truncateCommitLog), the
// entries it put are written to Badger through the committer (a write
// marked promote, durable in a later segment), and at close they are
// written to Badger before it closes. An entry forgotten once it was
// deleted is never promoted: such a promotion is written neither to
// Badger nor to the commit log (skip), so a replay cannot bring a
// delivered queue entry back.
type heldLog struct {
	mu     sync.Mutex
	m      map[string]*heldEntry // key → the entry
	queues map[string]*heldQueue // queuePrefix → its held entries
}

// heldEntry is an entry the commit log holds and Badger does not: seq is
// the earliest batch that put it and may be the durable one (a put again
// in a batch that fails must not move it past that one); putBy, when not
// 0, the batch in flight that first put it (until it is durable the entry
// is not listed, and if it fails the entry goes); delBy, the batch in
// flight whose deletion took it; promBy, the batch in flight that writes
// it to Badger. Either of those two forgets the entry once it is durable
// (settled): until then it is held, listed by keys and, unless being
// deleted, promoted as any other, so that a failed batch never loses it.
type heldEntry struct {
	key, val                             []byte
	seq, expiresAt, putBy, delBy, promBy uint64
	queue                                string // queue entries: their queue's prefix ("" for others)
	queueSeq                             uint64 // queue entries: the entry's sequence number
	gone                                 bool   // forgotten (its queue drops it lazily)
	// inBadger: Badger may hold a copy (promoted, then put again: the put
	// again is held, Badger keeps the promoted one), so its deletion goes
	// to Badger too.
	inBadger bool
}

// heldQueue is the held entries of one queue, in sequence order (the
// committer assigns queue sequence numbers in the order it puts entries),
// forgotten ones included until compact drops them.
type heldQueue struct {
	es   []*heldEntry
	gone int
}

func newHeldLog() *heldLog {
	return &heldLog{m: map[string]*heldEntry{}, queues: map[string]*heldQueue{}}
}

func isSentKey(k []byte) bool { return bytes.HasPrefix(k, []byte(prefixSent)) }

// isHeldKey reports whether writes of k are kept in the held log.
func isHeldKey(k []byte) bool {
	return isSentKey(k) || isQueueEntryKey(k)
}

// isQueueEntryKey reports whether k is an entryKey.
func isQueueEntryKey(k []byte) bool {
	return bytes.HasPrefix(k, []byte(prefixQueue)) && len(k) > len(prefixQueue)+8 && k[len(k)-9] == 0
}

// put notes the entry w puts, in batch seq, and returns its key as the
// held log keeps it (for the batch's keys: one copy for both).
func (l *heldLog) put(w *write, seq uint64) string {
	k := string(w.key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[k]; ok {
		// Put again (a Sent record's TTL grew): its earlier put may be the
		// durable one; a deletion or promotion in flight no longer
		// forgets it, and a promotion in flight may still reach Badger.
		e.seq, e.val, e.expiresAt = min(seq, e.seq), w.val, w.expiresAt
		e.inBadger = e.inBadger || e.promBy != 0
		e.delBy, e.promBy = 0, 0
		return k
	}
	// Not held: a put again (reput) of an entry that was held until a
	// promotion wrote it to Badger.
	e := &heldEntry{key: w.key, val: w.val, seq: seq, expiresAt: w.expiresAt, putBy: seq, inBadger: w.reput}
	l.m[k] = e
	if isQueueEntryKey(w.key) {
		qp, qseq := splitEntryKey(w.key)
		e.queue, e.queueSeq = string(qp), qseq
		q := l.queues[e.queue]
		if q == nil {
			q = &heldQueue{}
			l.queues[e.queue] = q
		}
		q.insert(e)
	}
	return k
}

// insert adds e in sequence order: at the end but when a batch split
// (carry) put again what it had put, after the forgotten first puts.
func (q *heldQueue) insert(e *heldEntry) {
	n := len(q.es)
	if n == 0 || q.es[n-1].queueSeq < e.queueSeq {
		q.es = append(q.es, e)
		return
	}
	i := q.search(e.queueSeq + 1)
	q.es = slices.Insert(q.es, i, e)
}

// search returns the index of the first entry whose sequence number is at
// least seq.
func (q *heldQueue) search(seq uint64) int {
	i, _ := slices.BinarySearchFunc(q.es, seq, func(e *heldEntry, t uint64) int {
		return cmp.Compare(e.queueSeq, t)
	})
	return i
}

// deleting marks key as deleted by batch seq. held reports whether the
// entry is held (the caller settles it with the batch); toBadger whether
// the deletion must go to Badger too (always when not held; when held,
// only if a promotion in flight is writing it there or Badger may hold an
// earlier copy: inBadger).
func (l *heldLog) deleting(key []byte, seq uint64) (held, toBadger bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[string(key)]
	if !ok {
		return false, true
	}
	e.delBy = seq
	return true, e.promBy != 0 || e.inBadger
}

// promoted marks key as written to Badger by batch seq and reports
// whether it is to be written: not when it is gone (deleted, or promoted
// already) nor while a deletion of it is in flight (the promotion would
// follow the deletion into Badger and bring it back; promoteHeld finds
// it still held and waits for another pass).
//
// It sets w's value and TTL to the entry's own: the entry may have been put
// again since w was made.
func (l *heldLog) promoted(w *write, seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[string(w.key)]
	if !ok || e.delBy != 0 {
		return false
	}
	e.promBy = seq
	w.val, w.expiresAt = e.val, e.expiresAt
	return true
}

// settled ends what batch seq did to keys, applied: durable, or applied
// by Badger (see settleHeld); else failed. Its first put of an entry makes
// the entry visible (applied; putsBy names those of a batch that did not
// sync, before) or forgets it (failed); its deletion or promotion forgets it
// (applied) or is undone. An entry put again, or promoted, since is left
// as it is.
func (l *heldLog) settled(keys []string, seq uint64, applied bool) {
	if l == nil || len(keys) == 0 {
		return // (no commit log: nothing held)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		e, held := l.m[k]
		if !held {
			continue
		}
		if e.putBy == seq {
			if e.putBy = 0; !applied {
				l.forgetLocked(e)
				continue
			}
		}
		if e.delBy != seq && e.promBy != seq {
			continue
		}
		if applied {
			l.forgetLocked(e)
			continue
		}
		e.delBy, e.promBy = 0, 0
	}
}

// putsBy returns, as writes, the entries of keys whose first put is batch
// seq, in flight, and that it does not delete.
func (l *heldLog) putsBy(keys []string, seq uint64) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []write
	for _, k := range keys {
		if e, ok := l.m[k]; ok && e.putBy == seq && e.delBy == 0 {
			ws = append(ws, write{key: e.key, val: e.val, expiresAt: e.expiresAt})
		}
	}
	return ws
}

// forget drops the entries ws wrote to Badger.
func (l *heldLog) forget(ws []write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range ws {
		if e, ok := l.m[string(w.key)]; ok {
			l.forgetLocked(e)
		}
	}
}

// forgetLocked drops e.
func (l *heldLog) forgetLocked(e *heldEntry) {
	delete(l.m, string(e.key))
	e.gone = true
	q := l.queues[e.queue]
	if q == nil {
		return // (not a queue entry)
	}
	q.gone++
	switch {
	case q.gone == len(q.es):
		delete(l.queues, e.queue)
	case q.gone > 64 && q.gone > len(q.es)/2:
		q.es = slices.DeleteFunc(q.es, func(e *heldEntry) bool { return e.gone })
		q.gone = 0
	}
}

// upTo returns the entries put in batches up to seq (as promote writes),
// but those being deleted.
func (l *heldLog) upTo(seq uint64) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []write
	for _, e := range l.m {
		if e.seq <= seq && e.delBy == 0 {
			ws = append(ws, write{key: e.key, val: e.val, expiresAt: e.expiresAt, promote: true})
		}
	}
	return ws
}

// pending counts the entries put in batches up to seq still held.
func (l *heldLog) pending(seq uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.m {
		if e.seq <= seq {
			n++
		}
	}
	return n
}

// sentKeys returns the record keys of the Sent index entries held.
func (l *heldLog) sentKeys() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for k := range l.m {
		if isSentKey([]byte(k)) {
			out = append(out, recordKeyOfSent([]byte(k)))
		}
	}
	return out
}

// heldListing is what the held log has of a queue after a sequence
// number: live, the entries to list (durable, not expired); seqs,
// every entry held in that range, which the listing of Badger's entries
// skips (the held log answers for them: a promotion in flight is in both,
// a deletion not yet in Badger in neither); bound, when not 0, the
// sequence number past which the listing stopped (limit live entries up
// to it).
type heldListing struct {
	live  [][]byte // the entries' encoded values
	seqs  []uint64
	bound uint64
}

// list returns the held entries of the queue with prefix qp after
// sequence number after, up to limit live ones: durable and not expired at
// now. One being deleted is listed until its deletion is durable: were
// that deletion to fail, a listing in between would have missed an entry
// still queued (the dispatcher passes over the entries it is deleting).
func (l *heldLog) list(qp []byte, after uint64, limit int, now time.Time) heldListing {
	var out heldListing
	if l == nil || limit <= 0 {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[string(qp)]
	if q == nil {
		return out
	}
	for _, e := range q.es[q.search(after+1):] {
		if e.gone || e.queueSeq <= after {
			continue
		}
		if len(out.live) == limit {
			out.bound = out.seqs[len(out.seqs)-1]
			break
		}
		out.seqs = append(out.seqs, e.queueSeq)
		if _, ok, _ := e.listable(now); ok {
			out.live = append(out.live, e.val)
		}
	}
	return out
}

// listable reports whether List and Depths show e at now, and e's queue
// (err: e's value is damaged; List then reports it). An entry is shown
// once the batch that put it is durable and until the one that deletes it
// is: as Badger shows an entry it holds, and as the receipts' depth gauge
// counts it (raised after Enqueue returns, lowered after Ack does).
func (e *heldEntry) listable(now time.Time) (queue []byte, ok bool, err error) {
	if e.putBy != 0 {
		return nil, false, nil
	}
	queue, exp, err := peekQueueExpires(e.val)
	return queue, err != nil || !expiredAt(exp, now), err
}

// queueCounts returns, per queue prefix, the sequence numbers of every
// entry held and the queue's name and number of those Depths counts
// (listable at now).
func (l *heldLog) queueCounts(now time.Time) (map[string]heldCount, error) {
	out := map[string]heldCount{}
	if l == nil {
		return out, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for qp, q := range l.queues {
		var c heldCount
		for _, e := range q.es {
			if e.gone {
				continue
			}
			c.seqs = append(c.seqs, e.queueSeq)
			name, ok, err := e.listable(now)
			if err != nil {
				return nil, fmt.Errorf("state: held queue entry %q: %w", e.key, err)
			}
			if ok {
				c.queue, c.live = string(name), c.live+1
			}
		}
		out[qp] = c
	}
	return out, nil
}

// heldCount is one queue's part of queueCounts.
type heldCount struct {
	seqs  []uint64
	queue string
	live  int
}

// holds reports whether seq, in seqs (sorted), is there.
func holds(seqs []uint64, seq uint64) bool {
	_, ok := slices.BinarySearch(seqs, seq)
	return ok
}

// stageHeld decides where write w of batch seq goes when it is an entry
// the held log keeps and the store has a commit log: it reports whether w
// is kept from Badger. taken collects the keys settled with the batch (see
// heldLog.settled). A promotion found to have nothing to write is marked
// skip, kept from the commit log too.
func (s *BadgerStore) stageHeld(w *write, seq uint64, taken *[]string) bool {
	if s.held == nil || !isHeldKey(w.key) {
		return false
	}
	switch {
	case w.promote:
		if w.skip = !s.held.promoted(w, seq); w.skip {
			return true
		}
		*taken = append(*taken, string(w.key))
		return false
	case !w.del:
		*taken = append(*taken, s.held.put(w, seq))
		return true
	}
	held, toBadger := s.held.deleting(w.key, seq)
	if held {
		*taken = append(*taken, string(w.key))
	}
	return !toBadger
}

// errHeldPending: entries a segment put are still held after their
// promotion (a deletion of theirs was in flight): the segment stays until
// a later pass.
var errHeldPending = errors.New("state: held entries still pending")

// promoteHeld writes to Badger, through the committer, the held entries
// the commit log put up to batch seq, before the segments holding those
// batches are removed. It returns errHeldPending when some are still held
// after that.
func (s *BadgerStore) promoteHeld(seq uint64) error {
	if s.held == nil {
		return nil
	}
	ws := s.held.upTo(seq)
	// In requests of promoteChunk writes, sent together: the committer
	// groups them into as few batches as fit.
	// At most promoteInFlight requests at a time, so that a backlog of
	// entries (a long upstream outage) does not crowd out the submits.
	errs := make([]error, (len(ws)+promoteChunk-1)/promoteChunk)
	var wg sync.WaitGroup
	sem := make(chan struct{}, promoteInFlight)
	for i := range errs {
		chunk := ws[i*promoteChunk : min(len(ws), (i+1)*promoteChunk)]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r := &request{writes: chunk, done: make(chan struct{})}
			if errs[i] = s.submit(context.Background(), r); errs[i] == nil && r.err != nil {
				errs[i] = fmt.Errorf("state: write held entries to the store: %w", r.err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if s.held.pending(seq) > 0 {
		return errHeldPending
	}
	return nil
}

// promoteInFlight bounds the promotion requests waiting for the committer
// at once.
const promoteInFlight = 4

// promoteChunk is the most held entries one request promotes.
const promoteChunk = 256

// flushHeldAtClose writes every entry still held to Badger, once no more
// writes come (Close), so that the commit log can go.
func (s *BadgerStore) flushHeldAtClose() error {
	if s.held == nil {
		return nil
	}
	ws := s.held.upTo(^uint64(0))
	if len(ws) == 0 {
		return nil
	}
	return applyBatch(s.db, ws)
}
