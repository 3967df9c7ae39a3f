package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
)

// The index of Sent records (sentKey) serves ScanState(Sent), which the
// engine's recovery at start-up uses to find the records a crash left in
// flight. Nearly every entry is short-lived: put when a submit's record is
// created (before its PDU is sent), deleted when its outcome is written a
// few milliseconds later. With the commit log, such an entry need never
// reach Badger: the commit log holds both writes, and a replay at open
// applies both. So the committer writes a Sent index entry to the commit
// log only and keeps it in sentLog, and the deletion of an entry still
// there goes to the commit log only too: a fresh submit then makes 3
// Badger entries instead of 5 (the record twice and its message-id
// entry), ~10% less of the proxy's CPU per submit.
//
// An entry still in sentLog must reach Badger before the commit log loses
// the batch that put it: before a segment is removed (truncateCommitLog),
// the entries it put are written to Badger through the committer (a
// write marked promote, durable in a later segment), and at close they
// are written to Badger before it closes. ScanState(Sent) reads the index
// in Badger and the entries in sentLog. An entry written to Badger twice,
// or one whose record has moved on, is harmless: ScanState skips records
// no longer Sent.
type sentLog struct {
	mu sync.Mutex
	m  map[string]sentEntry // sentKey → the entry
}

// sentEntry is a Sent index entry the commit log holds and Badger does
// not: seq is the earliest batch that put it and may be the durable one
// (a put again in a batch that fails must not move it past that one);
// delBy, when not 0, the batch in flight whose deletion took it (kept from
// Badger); promBy, the batch in flight that writes it to Badger. Either way
// the entry is forgotten only once that batch is durable (settled): until
// then it is held, listed by keys and promoted as any other, so that a
// failed batch never leaves the record unindexed.
type sentEntry struct {
	seq, expiresAt, delBy, promBy uint64
}

func newSentLog() *sentLog { return &sentLog{m: map[string]sentEntry{}} }

func isSentKey(k []byte) bool { return bytes.HasPrefix(k, []byte(prefixSent)) }

// put notes the entry w puts, in batch seq.
func (l *sentLog) put(w *write, seq uint64) {
	l.mu.Lock()
	if e, ok := l.m[string(w.key)]; ok {
		seq = min(seq, e.seq) // its earlier put may be the durable one
	}
	l.m[string(w.key)] = sentEntry{seq: seq, expiresAt: w.expiresAt}
	l.mu.Unlock()
}

// deleting marks key as deleted by batch seq and reports whether it is
// held (else the deletion goes to Badger).
func (l *sentLog) deleting(key []byte, seq uint64) bool {
	return l.mark(key, func(e *sentEntry) { e.delBy = seq })
}

// promoted marks key as written to Badger by batch seq and reports
// whether it is held (else its promotion is not written to Badger: a
// deletion took it).
func (l *sentLog) promoted(key []byte, seq uint64) bool {
	return l.mark(key, func(e *sentEntry) { e.promBy = seq })
}

// mark applies set to key's entry and reports whether there is one.
func (l *sentLog) mark(key []byte, set func(*sentEntry)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[string(key)]
	if ok {
		set(&e)
		l.m[string(key)] = e
	}
	return ok
}

// settled ends the deletions of keys by batch seq: durable (ok), the
// entries go; failed, they are held as before. An entry put again, or
// promoted, since is left as it is.
func (l *sentLog) settled(keys []string, seq uint64, ok bool) {
	if l == nil || len(keys) == 0 {
		return // (no commit log: nothing kept)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		e, held := l.m[k]
		switch {
		case !held || (e.delBy != seq && e.promBy != seq):
		case ok:
			delete(l.m, k)
		default:
			e.delBy, e.promBy = 0, 0
			l.m[k] = e
		}
	}
}

// upTo returns the entries put in batches up to seq (as promote writes),
// those being deleted included.
func (l *sentLog) upTo(seq uint64) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []write
	for k, e := range l.m {
		if e.seq <= seq {
			ws = append(ws, write{key: []byte(k), expiresAt: e.expiresAt, promote: true})
		}
	}
	return ws
}

// keys returns the record keys of the entries held.
func (l *sentLog) keys() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]byte, 0, len(l.m))
	for k := range l.m {
		out = append(out, recordKeyOfSent([]byte(k)))
	}
	return out
}

// stageSent decides where write w of batch seq goes when it is a Sent
// index entry and the store has a commit log: it reports whether w is
// kept from Badger (the commit log holds it). taken collects the keys
// whose deletion it kept (see sentLog.settled).
func (s *BadgerStore) stageSent(w *write, seq uint64, taken *[]string) bool {
	if s.sent == nil || !isSentKey(w.key) {
		return false
	}
	switch {
	case w.promote:
		if !s.sent.promoted(w.key, seq) {
			return true
		}
		*taken = append(*taken, string(w.key))
		return false
	case !w.del:
		s.sent.put(w, seq)
		return true
	case s.sent.deleting(w.key, seq):
		*taken = append(*taken, string(w.key))
		return true
	}
	return false
}

// promoteSent writes to Badger, through the committer, the Sent index
// entries the commit log put up to batch seq, before the segments holding
// those batches are removed.
func (s *BadgerStore) promoteSent(seq uint64) error {
	if s.sent == nil {
		return nil
	}
	ws := s.sent.upTo(seq)
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
				errs[i] = fmt.Errorf("state: write the index of sent records: %w", r.err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// promoteInFlight bounds the promotion requests waiting for the committer
// at once.
const promoteInFlight = 4

// promoteChunk is the most Sent index entries one request promotes.
const promoteChunk = 256

// flushSentAtClose writes every entry still held to Badger, once no more
// writes come (Close), so that the commit log can go.
func (s *BadgerStore) flushSentAtClose() error {
	if s.sent == nil {
		return nil
	}
	ws := s.sent.upTo(^uint64(0))
	if len(ws) == 0 {
		return nil
	}
	return applyBatch(s.db, ws)
}
