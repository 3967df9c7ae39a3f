package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/state"
)

// Reads by key (Get, and the read of Update) are grouped like the writes:
// the reads waiting at a moment are one statement, while the next group
// gathers. A fresh submit reads its key first; one statement per read
// would cost the database more than the submit's two writes. A receipt's
// lookup by message id (ByMessageIDHot) is grouped the same way, a
// statement of its own in the group's round trip.

// keyRead is one read by key waiting for the reader: what is stored under
// the key, expired or not. One by message id (byID) reads the live record
// holding upstream's id, without history, and sets key.
type keyRead struct {
	key          state.Key
	hot          bool // the history's first event only (AppendHot, EnqueueAppend)
	byID         bool
	upstream, id string
	found        bool
	st           string
	body         []byte
	hist         [][]byte
	exp          int64 // expires_ns
	wseq         int64
	err          error
	done         chan struct{}
}

// Reader sizing: groups of reads in flight at once.
const readers = 4

// sqlReadMany reads the records under the input keys (numbered n), of
// those read hot the history's first event only.
const sqlReadMany = `SELECT i.n, r.state, r.body, CASE WHEN i.hot THEN r.history[1:1] ELSE r.history END,
		r.expires_ns, r.wseq
	FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::bool[]) WITH ORDINALITY AS i(account, key, segment, hot, n)
	JOIN records r ON r.account = i.account AND r.key = i.key AND r.segment = i.segment`

// sqlReadByIDMany reads the live record holding each input's message id
// (numbered n), written last, without history.
const sqlReadByIDMany = `SELECT i.n, r.account, r.key, r.segment, r.state, r.body, r.expires_ns, r.wseq
	FROM unnest($1::bytea[], $2::bytea[]) WITH ORDINALITY AS i(upstream, id, n)
	CROSS JOIN LATERAL (SELECT account, key, segment, state, body, expires_ns, wseq FROM records x
		WHERE x.upstream = i.upstream AND x.match_id = i.id AND x.expires_ns > $3
		ORDER BY x.wseq DESC LIMIT 1) r`

// readKey reads the record under k with the reads waiting with it; hot,
// with the first event of its history only. ctx ending stops the wait,
// not the group's statement.
func (s *Store) readKey(ctx context.Context, k state.Key, hot bool) (*keyRead, error) {
	return s.readGrouped(ctx, &keyRead{key: k, hot: hot})
}

// readByID reads the live record holding upstream's message id with the
// reads waiting with it.
func (s *Store) readByID(ctx context.Context, upstream, id string) (*keyRead, error) {
	return s.readGrouped(ctx, &keyRead{byID: true, upstream: upstream, id: id})
}

func (s *Store) readGrouped(ctx context.Context, r *keyRead) (*keyRead, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	if err := s.health.gate(); err != nil {
		s.exit()
		return nil, err
	}
	r.done = make(chan struct{})
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

// readMany runs one group of reads: the reads by key as one statement,
// those by message id as another.
func (s *Store) readMany(batch []*keyRead) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	var byKey, byID []*keyRead
	for _, r := range batch {
		if r.byID {
			byID = append(byID, r)
		} else {
			byKey = append(byKey, r)
		}
	}
	b := &pgx.Batch{}
	b.Queue(sqlIndexProbes)
	if len(byKey) > 0 {
		acc, key, seg := make([][]byte, len(byKey)), make([][]byte, len(byKey)), make([][]byte, len(byKey))
		hot := make([]bool, len(byKey))
		for i, r := range byKey {
			acc[i], key[i], seg[i], hot[i] = col(r.key.Account), col(r.key.Key), col(r.key.Segment), r.hot
		}
		b.Queue(sqlReadMany, acc, key, seg, hot).Query(func(rows pgx.Rows) error { return scanReads(rows, byKey) })
	}
	if len(byID) > 0 {
		ups, ids := make([][]byte, len(byID)), make([][]byte, len(byID))
		for i, r := range byID {
			ups[i], ids[i] = col(r.upstream), col(r.id)
		}
		b.Queue(sqlReadByIDMany, ups, ids, unixNano(s.now())).Query(func(rows pgx.Rows) error { return scanReadsByID(rows, byID) })
	}
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

func scanReadsByID(rows pgx.Rows, batch []*keyRead) error {
	defer rows.Close()
	for rows.Next() {
		var n int64
		var account, key, segment, body []byte
		var st string
		var exp, wseq int64
		if err := rows.Scan(&n, &account, &key, &segment, &st, &body, &exp, &wseq); err != nil {
			return err
		}
		if n < 1 || int(n) > len(batch) {
			return errors.New("pgstore: read of a message id not asked for")
		}
		r := batch[n-1]
		r.key = state.Key{Account: string(account), Key: string(key), Segment: string(segment)}
		r.found, r.st, r.body, r.exp, r.wseq = true, st, body, exp, wseq
	}
	return rows.Err()
}

// gatherBatches collects what arrives on in into batches of at most max
// and hands each to the first free worker on out: while the workers are
// busy, the next batch grows. With a gate, a batch goes to a free worker
// while another worker's batch is in flight only once it holds
// gate.eager items (see pipeGate). It closes out once in is closed and
// every item is handed on.
func gatherBatches[T any](in <-chan T, out chan<- []T, max int, gate *pipeGate) {
	defer close(out)
	var pending []T
	var wake <-chan struct{}
	if gate != nil {
		wake = gate.done
	}
	for in != nil || len(pending) > 0 {
		var send chan<- []T
		if len(pending) > 0 && gate.ready(len(pending)) {
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
			gate.handed()
		case <-wake:
		}
	}
}

// pipeGate paces the write batches of an instance: the first batch goes
// to PostgreSQL at once, a second one while the first is in flight only
// when it holds eager requests; smaller, it waits for the first to end
// and grows meanwhile. Each batch costs PostgreSQL and this process a
// transaction, a WAL flush and a round trip whatever its size, so while
// the load is moderate, or spread over several instances on one
// database, fewer and fuller batches cost less CPU per submit (two
// instances on one 2-core machine: ~20% less in each) for at most one
// round trip more of waiting; under a heavy load the batches are full
// and pipelined as before.
type pipeGate struct {
	eager int
	busy  atomic.Int32  // batches handed to the workers and not done
	done  chan struct{} // a worker finished a batch (capacity 1)
}

func newPipeGate(eager int) *pipeGate {
	return &pipeGate{eager: eager, done: make(chan struct{}, 1)}
}

// ready reports whether a batch of n may go now (a nil gate: always).
func (g *pipeGate) ready(n int) bool {
	return g == nil || g.busy.Load() == 0 || n >= g.eager
}

func (g *pipeGate) handed() {
	if g != nil {
		g.busy.Add(1)
	}
}

// finished is called by a worker when its batch is done.
func (g *pipeGate) finished() {
	if g == nil {
		return
	}
	g.busy.Add(-1)
	select {
	case g.done <- struct{}{}:
	default:
	}
}
