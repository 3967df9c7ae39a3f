package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/state"
)

var errNilEntry = errors.New("pgstore: Enqueue of a nil entry")

// Enqueue implements state.Queue. Enqueuing transactions hold an advisory
// lock while they draw sequence numbers and commit, so the numbers are
// strictly increasing in commit order across every instance. A batch's
// Enqueues (and EnqueueAppends) are one statement.
func (s *Store) Enqueue(ctx context.Context, e *state.QueueEntry) (uint64, bool, error) {
	seq, dup, _, err := s.enqueue(ctx, e, nil)
	return seq, dup, err
}

// enqueue is Enqueue of e and, when app is set, app's change to its record
// in the same statement, made only when e is enqueued (not a duplicate)
// and the record still has the write sequence app read. appended reports
// that change made.
func (s *Store) enqueue(ctx context.Context, e *state.QueueEntry, app *recordAppend) (seq uint64, dup, appended bool, err error) {
	if e == nil {
		return 0, false, false, errNilEntry
	}
	op := &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(s.now()), app: app}
	r := &request{seqLock: true, enqueue: op}
	if e.DedupKey != "" {
		op.dedup = col(e.DedupKey)
		r.order = lockOrder{table: orderMarker, a: op.queue, b: op.dedup}
	} else {
		r.order = lockOrder{table: orderEntry, a: op.queue}
	}
	if err := s.submit(ctx, r); err != nil {
		return 0, false, false, err
	}
	if op.err != nil {
		return 0, false, false, op.err
	}
	return uint64(op.seq), op.dup, op.appended, nil
}

// List implements state.Queue.
func (s *Store) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	return s.list(ctx, queue, after, limit, nil)
}

// sqlList lists a queue; sqlListClaimable leaves out the entries on which
// another owner's claim is still running on the database's clock ($5: the
// owner listing).
const (
	sqlList = `SELECT seq, entry FROM queue_entries
			WHERE queue = $1 AND seq > $2 AND expires_ns > $3 ORDER BY seq LIMIT $4`
	sqlListClaimable = `SELECT seq, entry FROM queue_entries
			WHERE queue = $1 AND seq > $2 AND expires_ns > $3
				AND (claimed_by IS NULL OR claimed_by = $5 OR claimed_until_ns <= ` + sqlNowNS + `)
			ORDER BY seq LIMIT $4`
)

// list is List, or ListClaimable for owner when owner is not nil.
func (s *Store) list(ctx context.Context, queue string, after uint64, limit int, owner *string) ([]*state.QueueEntry, error) {
	var out []*state.QueueEntry
	err := s.read(ctx, func(ctx context.Context) error {
		if limit <= 0 {
			return nil
		}
		q, args := sqlList, []any{col(queue), seqArg(after), unixNano(s.now()), limit}
		if owner != nil {
			q, args = sqlListClaimable, append(args, s.claimOwner(*owner))
		}
		rows, err := s.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				seq   int64
				entry []byte
			)
			if err := rows.Scan(&seq, &entry); err != nil {
				return err
			}
			e, err := decodeEntry([]byte(queue), seq, entry)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	return out, err
}

// seqArg is a sequence number as a bigint argument (the sequence never
// reaches the top bit).
func seqArg(seq uint64) int64 {
	if seq > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(seq)
}

// Ack implements state.Queue.
func (s *Store) Ack(ctx context.Context, queue string, seq uint64) error {
	return s.AckAll(ctx, queue, []uint64{seq})
}

// AckAll acknowledges the entries seqs of queue in one statement of one
// batch (the receipts' dispatcher gathers the Acks that arrive while one
// is written).
func (s *Store) AckAll(ctx context.Context, queue string, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	args := make([]int64, len(seqs))
	for i, seq := range seqs {
		args[i] = seqArg(seq)
	}
	slices.Sort(args)
	r := &request{order: lockOrder{table: orderEntry, a: []byte(queue), b: binary.BigEndian.AppendUint64(nil, uint64(args[0]))}}
	r.queue = func(b *pgx.Batch) {
		b.Queue(`DELETE FROM queue_entries WHERE queue = $1 AND seq = ANY($2)`, col(queue), args)
	}
	return s.submit(ctx, r)
}

// Depths implements state.Queue.
func (s *Store) Depths(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.read(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT queue, count(*) FROM queue_entries WHERE expires_ns > $1 GROUP BY queue`, unixNano(s.now()))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				q []byte
				n int64
			)
			if err := rows.Scan(&q, &n); err != nil {
				return err
			}
			out[string(q)] = int(n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
