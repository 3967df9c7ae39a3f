package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/state"
)

// Reads by key (Get, and the read of Update) are grouped like the writes:
// the reads waiting at a moment are one statement, while the next group
// gathers. A fresh submit reads its key first; one statement per read
// would cost the database more than the submit's two writes.

// keyRead is one read by key waiting for the reader: what is stored under
// the key, expired or not.
type keyRead struct {
	key   state.Key
	hot   bool // the history's first event only (AppendHot, EnqueueAppend)
	found bool
	st    string
	body  []byte
	hist  [][]byte
	exp   int64 // expires_ns
	wseq  int64
	err   error
	done  chan struct{}
}

// Reader sizing: groups of reads in flight at once.
const readers = 4

// sqlReadMany reads the records under the input keys (numbered n), of
// those read hot the history's first event only.
const sqlReadMany = `SELECT i.n, r.state, r.body, CASE WHEN i.hot THEN r.history[1:1] ELSE r.history END,
		r.expires_ns, r.wseq
	FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::bool[]) WITH ORDINALITY AS i(account, key, segment, hot, n)
	JOIN records r ON r.account = i.account AND r.key = i.key AND r.segment = i.segment`

// readKey reads the record under k with the reads waiting with it; hot,
// with the first event of its history only. ctx ending stops the wait,
// not the group's statement.
func (s *Store) readKey(ctx context.Context, k state.Key, hot bool) (*keyRead, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := s.health.gate(); err != nil {
		s.exit()
		return nil, err
	}
	r := &keyRead{key: k, hot: hot, done: make(chan struct{})}
	select {
	case s.reads <- r:
		s.exit()
	case <-ctx.Done():
		s.exit()
		return nil, fmt.Errorf("pgstore: %w", ctx.Err())
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("pgstore: %w", ctx.Err())
	}
	if r.err != nil {
		return nil, wrapErr(r.err)
	}
	return r, nil
}

// live reports whether the read found a record that has not expired at
// now.
func (r *keyRead) live(now time.Time) bool { return r.found && r.exp > unixNano(now) }

func (s *Store) readLoop() {
	defer s.commitDone.Done()
	for batch := range s.readBatches {
		err := s.readMany(batch)
		s.health.report(err)
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
	}
}

// readMany runs one group of reads.
func (s *Store) readMany(batch []*keyRead) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	acc, key, seg := make([][]byte, len(batch)), make([][]byte, len(batch)), make([][]byte, len(batch))
	hot := make([]bool, len(batch))
	for i, r := range batch {
		acc[i], key[i], seg[i], hot[i] = col(r.key.Account), col(r.key.Key), col(r.key.Segment), r.hot
	}
	b := &pgx.Batch{}
	b.Queue(sqlIndexProbes)
	b.Queue(sqlReadMany, acc, key, seg, hot).Query(func(rows pgx.Rows) error { return scanReads(rows, batch) })
	return s.pool.SendBatch(ctx, b).Close()
}

// sqlIndexProbes makes the statements after it in its transaction join
// the records of a batch's keys by probing the primary key, whatever
// the planner thinks of the table's size: a plan cached while the table
// was small would otherwise scan all of it for every batch.
const sqlIndexProbes = `SELECT set_config('enable_seqscan', 'off', true)`

func scanReads(rows pgx.Rows, batch []*keyRead) error {
	defer rows.Close()
	for rows.Next() {
		var n int64
		var st string
		var body []byte
		var hist [][]byte
		var exp, wseq int64
		if err := rows.Scan(&n, &st, &body, &hist, &exp, &wseq); err != nil {
			return err
		}
		if n < 1 || int(n) > len(batch) {
			return errors.New("pgstore: read of a key not asked for")
		}
		r := batch[n-1]
		r.found, r.st, r.body, r.hist, r.exp, r.wseq = true, st, body, hist, exp, wseq
	}
	return rows.Err()
}

// gatherBatches collects what arrives on in into batches of at most max
// and hands each to the first free worker on out: while the workers are
// busy, the next batch grows. It closes out once in is closed and every
// item is handed on.
func gatherBatches[T any](in <-chan T, out chan<- []T, max int) {
	defer close(out)
	var pending []T
	for in != nil || len(pending) > 0 {
		var send chan<- []T
		if len(pending) > 0 {
			send = out
		}
		recv := in
		if len(pending) >= max {
			recv = nil
		}
		select {
		case r, ok := <-recv:
			if !ok {
				in = nil
				continue
			}
			pending = append(pending, r)
		case send <- pending:
			pending = nil
		}
	}
}
