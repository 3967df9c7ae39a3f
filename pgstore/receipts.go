package pgstore

import (
	"context"

	"github.com/smppproxy/smppproxy/state"
)

// The intake of a receipt finds its record by message id, queues the
// receipt for the record's account and marks the record delivered (an
// event appended, the delivery state set). None of it needs the record's
// history: ByMessageIDHot reads none, and the mark is written as events
// appended to the stored history (cap_history in the statement) after a
// read of its first event only. EnqueueAppend makes the entry and the
// mark part of the batch's one statement of enqueues: one transaction,
// the WAL flush shared with the batch's other writes.

// newRecordAppend is the change of a record to next, with events added
// appended to its stored history, if it still has write sequence expect.
func newRecordAppend(next *state.Record, added [][]byte, expect int64) *recordAppend {
	if added == nil {
		added = [][]byte{}
	}
	return &recordAppend{args: recordArgs(next, nil), added: added, expect: expect}
}

// ByMessageIDHot is ByMessageID without reading the record's history
// (Record.History is nil): for the receipt intake, which needs the
// record's key, state and ids only. The lookups waiting at a moment are
// one statement, as the reads by key.
func (s *Store) ByMessageIDHot(ctx context.Context, upstream, id string) (*state.Record, error) {
	if id == "" {
		return s.notFound(ctx)
	}
	r, err := s.readByID(ctx, upstream, id)
	if err != nil {
		return nil, err
	}
	if !r.live(s.now()) {
		return nil, state.ErrNotFound
	}
	return decodeRecord(r.key, r.st, r.body, nil)
}

// hotChange reads the record under k with the first event of its history
// only and calls fn on it. It returns fn's record, the events fn appended
// (encoded) and the write sequence read, for a write that appends them to
// the stored history on condition that nobody wrote the record since;
// next is nil when fn rewrote the history (it saw the first event only,
// so only Update can store that). err is the read's (state.ErrNotFound
// for no live record) or fn's.
func (s *Store) hotChange(ctx context.Context, k state.Key, fn func(*state.Record) error) (next *state.Record, added [][]byte, wseq int64, err error) {
	r, err := s.readKey(ctx, k, true)
	if err != nil {
		return nil, nil, 0, err
	}
	if !r.live(s.now()) {
		return nil, nil, 0, state.ErrNotFound
	}
	cur, err := decodeRecord(k, r.st, r.body, r.hist)
	if err != nil {
		return nil, nil, 0, err
	}
	next, err = runUpdate(cur, fn)
	if err != nil {
		return nil, nil, 0, err
	}
	added, rewrite := state.HistoryDelta(r.hist, encodeEvents(next.History), sameBytes)
	if rewrite {
		return nil, nil, 0, nil
	}
	return next, added, r.wseq, nil
}

// AppendHot is Update for a change that reads no history and only appends
// events to it: fn sees the record with the first event of its history
// only and may append events; they are stored after the stored ones, as
// Update would store them (the history capped the same way). The write
// goes to the group commit on condition that nobody wrote the record
// since its read; otherwise, or when fn does more with the history than
// append to it, AppendHot does what Update does. It returns no record.
func (s *Store) AppendHot(ctx context.Context, k state.Key, fn func(*state.Record) error) error {
	next, added, wseq, err := s.hotChange(ctx, k, fn)
	if err != nil {
		return err
	}
	if next == nil {
		_, err := s.Update(ctx, k, fn)
		return err
	}
	op := &casOp{args: recordArgs(next, nil), expect: wseq, append: true, added: added}
	if err := s.submit(ctx, &request{order: keyOrder(k), cas: op}); err != nil {
		return err
	}
	if !op.applied {
		_, err := s.lockedUpdate(ctx, k, fn)
		return err
	}
	return nil
}

// EnqueueAppend is Enqueue of e and, in the same statement of the same
// batch (one transaction, with the batch's other enqueues), AppendHot of record k with fn — made only when
// e is enqueued, not for a duplicate. appended reports whether the record
// was changed: not when it is gone, fn failed (state.ErrAbort: the key
// holds another record), fn's change needs what AppendHot leaves to
// Update, or another writer changed the record between its read and the
// write (the caller then updates it by itself if it still wants to); err
// is Enqueue's (a failed transaction writes neither).
func (s *Store) EnqueueAppend(ctx context.Context, e *state.QueueEntry, k state.Key, fn func(*state.Record) error) (seq uint64, dup, appended bool, err error) {
	if e == nil {
		return 0, false, false, errNilEntry
	}
	var w *recordAppend
	// A failed read leaves the record alone: the entry is what the caller
	// must not lose, and the enqueue reports the store's state.
	if next, added, wseq, err := s.hotChange(ctx, k, fn); err == nil && next != nil {
		w = newRecordAppend(next, added, wseq)
	}
	return s.enqueue(ctx, e, w)
}
