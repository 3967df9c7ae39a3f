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
		WHERE x.upstream = i.upstream AND x.match_id = i.id AND x.expires_ns + 0 > $3
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
// while another worker's batch is in flight only when the gate says so
// (see pipeGate). It closes out once in is closed and every item is
// handed on.
func gatherBatches[T any](in <-chan T, out chan<- []T, max int, gate *pipeGate) {
	defer close(out)
	var pending []T
	var wake <-chan struct{}
	var hold *time.Timer // fires when a batch held by the gate may go
	if gate != nil {
		wake = gate.done
		hold = time.NewTimer(time.Hour)
		hold.Stop()
		defer hold.Stop()
	}
	for in != nil || len(pending) > 0 {
		var send chan<- []T
		var held <-chan time.Time
		if len(pending) > 0 {
			if wait := gate.wait(len(pending), time.Now()); wait <= 0 {
				send = out
			} else {
				hold.Reset(wait)
				held = hold.C
			}
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
			gate.handed(time.Now())
		case <-wake:
		case <-held:
		}
		if held != nil && !hold.Stop() {
			select {
			case <-hold.C:
			default:
			}
		}
	}
}

// pipeGate paces the write batches of an instance: the first batch goes
// to PostgreSQL at once; while it is in flight, the next goes only once
// it holds eager requests or the one in flight has taken maxHold; until
// then it waits and grows. Each batch costs PostgreSQL and this process a
// transaction, a WAL flush and a round trip whatever its size, so while
// the load is moderate, or spread over several instances on one
// database, fewer and fuller batches cost less CPU per submit (two
// instances on one 2-core machine: ~20% less in each) for at most maxHold
// of waiting (a batch slowed by a failure, or a connection that hangs,
// holds the next one no longer); under a heavy load the batches are full
// and pipelined as before.
type pipeGate struct {
	eager   int
	maxHold time.Duration
	busy    atomic.Int32  // batches handed to the workers and not done
	started time.Time     // when the last batch was handed (gatherer only)
	done    chan struct{} // a worker finished a batch (capacity 1)
}

func newPipeGate(eager int, maxHold time.Duration) *pipeGate {
	return &pipeGate{eager: eager, maxHold: maxHold, done: make(chan struct{}, 1)}
}

// wait returns how long a batch of n must still wait at now (<= 0: it
// may go; a nil gate: always).
func (g *pipeGate) wait(n int, now time.Time) time.Duration {
	if g == nil || g.busy.Load() == 0 || n >= g.eager {
		return 0
	}
	return g.maxHold - now.Sub(g.started)
}

func (g *pipeGate) handed(now time.Time) {
	if g != nil {
		g.busy.Add(1)
		g.started = now
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
