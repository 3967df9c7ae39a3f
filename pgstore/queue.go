package pgstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/state"
)

const (
	sqlEnqueue = `INSERT INTO queue_entries (seq, queue, expires_ns, entry)
		VALUES (nextval('queue_seq'), $1, $2, $3) RETURNING seq`
	// cteMarker writes the marker unless a live one holds the key (an
	// expired one is replaced); sqlEntryOfMarker the entry only with a new
	// marker.
	cteMarker = `m AS (
			INSERT INTO queue_markers AS q (queue, dedup_key, seq, expires_ns)
			VALUES ($1, $4, nextval('queue_seq'), $2)
			ON CONFLICT (queue, dedup_key) DO UPDATE SET seq = EXCLUDED.seq, expires_ns = EXCLUDED.expires_ns
			WHERE q.expires_ns <= $5
			RETURNING seq)`
	sqlEntryOfMarker = `INSERT INTO queue_entries (seq, queue, expires_ns, entry) SELECT seq, $1, $2, $3 FROM m RETURNING seq`
	sqlEnqueueDedup  = `WITH ` + cteMarker + ` ` + sqlEntryOfMarker
	sqlMarker        = `SELECT seq FROM queue_markers WHERE queue = $1 AND dedup_key = $2`
)

var errNilEntry = errors.New("pgstore: Enqueue of a nil entry")

// Enqueue implements state.Queue. Enqueuing transactions hold an advisory
// lock while they draw sequence numbers and commit, so the numbers are
// strictly increasing in commit order across every instance.
func (s *Store) Enqueue(ctx context.Context, e *state.QueueEntry) (uint64, bool, error) {
	seq, dup, _, err := s.enqueue(ctx, e, nil)
	return seq, dup, err
}

// enqueue is Enqueue of e and, when w is set, w's change to its record in
// the same statement, made only when e is enqueued (not a duplicate) and
// the record still has the write sequence w read. appended reports that
// change made.
func (s *Store) enqueue(ctx context.Context, e *state.QueueEntry, w *recordAppend) (seq uint64, dup, appended bool, err error) {
	if e == nil {
		return 0, false, false, errNilEntry
	}
	args := []any{col(e.Queue), expiresNS(e.Expires), encodeEntry(e)}
	var (
		got    int64
		getErr error
	)
	r := &request{seqLock: true}
	q := sqlEnqueue
	if e.DedupKey != "" {
		args = append(args, col(e.DedupKey), unixNano(s.now()))
		q = sqlEnqueueDedup
		r.order = lockOrder{table: orderMarker, a: []byte(e.Queue), b: []byte(e.DedupKey)}
	} else {
		r.order = lockOrder{table: orderEntry, a: []byte(e.Queue)}
	}
	if w != nil {
		q = sqlEnqueueAppend(e.DedupKey != "")
		args = append(args, w.args...)
		r.byKey = true
	}
	r.queue = func(b *pgx.Batch) {
		got, dup, appended, getErr = 0, false, false, nil
		b.Queue(q, args...).QueryRow(func(row pgx.Row) error {
			dest := []any{&got}
			if w != nil {
				dest = append(dest, &appended)
			}
			if err := row.Scan(dest...); errors.Is(err, pgx.ErrNoRows) {
				dup = true // only with a dedup key: the entry was not written
			} else if err != nil {
				return err
			}
			return nil
		})
		if e.DedupKey != "" {
			b.Queue(sqlMarker, args[0], args[3]).QueryRow(func(row pgx.Row) error {
				var m int64
				if getErr = row.Scan(&m); dup {
					got = m
				}
				return nil
			})
		}
		// Delivered to the listeners when the batch's transaction commits;
		// hex, as a queue name may hold any byte and a payload is text.
		b.Queue(`SELECT pg_notify($1, $2)`, s.notifyChannel(), hex.EncodeToString([]byte(e.Queue)))
	}
	if err := s.submit(ctx, r); err != nil {
		return 0, false, false, err
	}
	if dup && getErr != nil {
		return 0, false, false, wrapErr(getErr)
	}
	return uint64(got), dup, appended, nil
}

// List implements state.Queue.
func (s *Store) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	var out []*state.QueueEntry
	err := s.read(ctx, func(ctx context.Context) error {
		if limit <= 0 {
			return nil
		}
		rows, err := s.pool.Query(ctx, `SELECT seq, entry FROM queue_entries
			WHERE queue = $1 AND seq > $2 AND expires_ns > $3 ORDER BY seq LIMIT $4`,
			col(queue), seqArg(after), unixNano(s.now()), limit)
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
	r := &request{order: lockOrder{table: orderEntry, a: []byte(queue), b: binary.BigEndian.AppendUint64(nil, seq)}}
	r.queue = func(b *pgx.Batch) {
		b.Queue(`DELETE FROM queue_entries WHERE queue = $1 AND seq = $2`, col(queue), seqArg(seq))
	}
	return s.submit(ctx, r)
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
