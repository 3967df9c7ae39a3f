package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/smppproxy/smppproxy/state"
)

// The columns a write sets, $1…$14, then the write sequence.
const (
	recordColumns = `account, key, segment, state, owner_instance, expires_ns, upstream,
		match_id, session, seq, proxy_id, addr_hash, body, history, wseq`
	recordValues = `$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, nextval('record_wseq')`
	// readColumns are what scanRow reads.
	readColumns = `account, key, segment, state, body, history`
	byKey       = `account = $1 AND key = $2 AND segment = $3`
)

// recordSetFrom is the SET list of a write of a record's columns from the
// row src (EXCLUDED, or a statement's input row), but for its history and
// its write sequence, which each statement sets its own way.
func recordSetFrom(src string) string {
	cols := []string{"state", "owner_instance", "expires_ns", "upstream", "match_id", "session", "seq", "proxy_id", "addr_hash", "body"}
	for i, c := range cols {
		cols[i] = c + " = " + src + "." + c
	}
	return strings.Join(cols, ", ")
}

// sqlReplace writes a record still as its writer holds it (sqlStillHeld:
// state $17, owner instance $18), or whose row is gone, while the writer
// holds its instance and, for a journal, its lease (sqlWriterHolds: $19,
// token $20), its history growing by $16 (capped) unless $15 says the
// writer replaced it ($14): the second Replace of a key in a batch.
var sqlReplace = `INSERT INTO records AS r (` + recordColumns + `) SELECT ` + recordValues + `
		WHERE ` + sqlWriterHolds("$4::text", 19, 20) + `
		ON CONFLICT (account, key, segment) DO UPDATE SET ` + recordSetFrom("EXCLUDED") + `, wseq = EXCLUDED.wseq,
		history = CASE WHEN $15 THEN EXCLUDED.history ELSE cap_history(r.history || $16::bytea[], 64) END
		WHERE ` + sqlStillHeld("r", "EXCLUDED.state", "$17::text", "$18::text") + ` AND ` + sqlWriterHolds("EXCLUDED.state", 19, 20)

const (
	sqlLockKey = `SELECT state, body, history, expires_ns FROM records WHERE ` + byKey + ` FOR UPDATE`
	sqlUpdate  = `UPDATE records SET state = $4, owner_instance = $5, expires_ns = $6, upstream = $7,
		match_id = $8, session = $9, seq = $10, proxy_id = $11, addr_hash = $12, body = $13,
		history = $14, wseq = nextval('record_wseq') WHERE ` + byKey
)

var errNilRecord = errors.New("pgstore: nil record")

// recordArgs are the arguments $1…$14 of a write of r with history h.
func recordArgs(r *state.Record, h [][]byte) []any {
	var matchID, session, addr []byte
	if id := r.MatchID(); id != "" {
		matchID = []byte(id)
	}
	if r.Session != "" {
		session = []byte(r.Session)
	}
	if r.AddrHash != ([16]byte{}) {
		addr = append([]byte(nil), r.AddrHash[:]...)
	}
	if h == nil {
		h = [][]byte{}
	}
	return []any{
		col(r.Key.Account), col(r.Key.Key), col(r.Key.Segment), textCol(string(r.State)), textCol(state.OwnerInstance(r.Owner)),
		expiresNS(r.Expires), col(r.Upstream), matchID, session, int64(r.Sequence), optCol(r.ProxyID), addr,
		encodeBody(r), h,
	}
}

func keyOrder(k state.Key) lockOrder {
	return lockOrder{table: orderRecord, a: []byte(k.Account), b: []byte(k.Key), c: []byte(k.Segment)}
}

// Create implements state.Store: the batch's Creates are one statement
// that inserts each record unless a live one holds its key; that holder is
// then read and returned.
func (s *Store) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	if rec == nil {
		return nil, false, errNilRecord
	}
	for attempt := 0; ; attempt++ {
		op := newCreateOp(rec, unixNano(s.now()))
		if err := s.submit(ctx, &request{order: keyOrder(rec.Key), create: op}); err != nil {
			return nil, false, err
		}
		switch {
		case op.err != nil:
			return nil, false, op.err
		case op.created:
			return nil, true, nil
		case op.existing != nil:
			return op.existing, false, nil
		}
		// A live record holds the key: read it (and, should it have
		// expired since, try again).
		existing, err := s.Get(ctx, rec.Key)
		if !errors.Is(err, state.ErrNotFound) {
			return existing, false, err
		}
		if attempt == 3 {
			return nil, false, fmt.Errorf("pgstore: Create(%v): the key's holder keeps changing", rec.Key)
		}
	}
}

// Replace implements state.Store: rec is written over what is stored under
// its key, without reading it first, when that is still in old's state and
// of old's owner instance (or gone); the stored history grows by the events
// rec has beyond old's. A record that another instance changed meanwhile
// (it took over the sent records of a lease that ran out) is left as it
// is, and Replace fails with ErrChanged (and state.ErrTakenOver): its
// writer no longer owns it.
func (s *Store) Replace(ctx context.Context, old, rec *state.Record) error {
	if old == nil || rec == nil {
		return errNilRecord
	}
	if old.Key != rec.Key {
		return fmt.Errorf("pgstore: Replace of %v by a record of another key %v", old.Key, rec.Key)
	}
	op := newReplaceOp(old, rec)
	if err := s.submit(ctx, &request{order: keyOrder(rec.Key), replace: op}); err != nil {
		return err
	}
	if op.applied {
		return nil
	}
	return op.err
}

// refusal is the error of a write of record k in state next that its
// writer may not make (nil when it may): the process no longer holds its
// instance (held false), or, for a journal (next is sent, after which the
// submit is written upstream), its lease is gone (lease false). As
// sqlWriterHolds decides in the statements.
func (s *Store) refusal(k state.Key, next state.SubmitState, lease, held bool) error {
	switch {
	case !held:
		return s.notHolder(k)
	case next == state.Sent && !lease:
		return fmt.Errorf("pgstore: journal of %v: %w", k, state.ErrLeaseLost)
	}
	return nil
}

// notHolder is the error of a write of k refused because this process no
// longer holds its instance: another process started with its id.
func (s *Store) notHolder(k state.Key) error {
	return fmt.Errorf("%w: instance %q is another process's now; %v not written: %w", ErrInstanceInUse, s.opts.InstanceID, k, state.ErrTakenOver)
}

// newReplaceOp is the write of Replace(old, rec).
func newReplaceOp(old, rec *state.Record) *replaceOp {
	oldH, nextH := encodeEvents(old.History), encodeEvents(rec.History)
	added, rewrite := state.HistoryDelta(oldH, nextH, sameBytes)
	if added == nil {
		added = [][]byte{}
	}
	return &replaceOp{args: recordArgs(rec, state.StoredHistory(oldH, nextH, sameBytes)), rewrite: rewrite, added: added,
		oldState: textCol(string(old.State)), oldOwner: textCol(state.OwnerInstance(old.Owner)), key: rec.Key, next: rec.State}
}

// Update implements state.Store. It reads the record, calls fn and hands
// the result to the group commit as a write conditional on the record
// being unchanged since the read; when another writer got in between, it
// runs again in a transaction of its own that locks the row (SELECT … FOR
// UPDATE). fn may therefore be called twice; only the last call's result
// is stored.
func (s *Store) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	r, err := s.readKey(ctx, k, false)
	if err != nil {
		return nil, err
	}
	if !r.live(s.now()) {
		return nil, state.ErrNotFound
	}
	cur, err := decodeRecord(k, r.st, r.body, r.hist)
	if err != nil {
		return nil, err
	}
	hist, wseq := r.hist, r.wseq
	next, err := runUpdate(cur, fn)
	if err != nil {
		return cur, err
	}
	h := state.StoredHistory(hist, encodeEvents(next.History), sameBytes)
	op := &casOp{args: recordArgs(next, h), expect: wseq}
	if err := s.submit(ctx, &request{order: keyOrder(k), cas: op}); err != nil {
		return nil, err
	}
	if !op.applied {
		return s.lockedUpdate(ctx, k, fn)
	}
	next.History, err = decodeHistory(h)
	return next, err
}

// writerHolds returns nil while this process may write record k in state
// next, in transaction tx: it holds its instance and, for a journal (next
// is sent, after which the submit is written upstream), its lease, on the
// database's clock (as sqlWriterHolds).
func (s *Store) writerHolds(ctx context.Context, tx pgx.Tx, k state.Key, next state.SubmitState) error {
	var lease, held bool
	if err := tx.QueryRow(ctx, sqlWriter, s.opts.InstanceID, s.token).Scan(&lease, &held); err != nil {
		return err
	}
	return s.refusal(k, next, lease, held)
}

// lockedUpdate is Update in a transaction of its own that locks the row.
func (s *Store) lockedUpdate(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := s.health.gate(); err != nil {
		return nil, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	var (
		cur, stored *state.Record
		fnErr       error
	)
	err := pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error {
		var (
			st      string
			body    []byte
			hist    [][]byte
			expires int64
		)
		err := tx.QueryRow(octx, sqlLockKey, col(k.Account), col(k.Key), col(k.Segment)).Scan(&st, &body, &hist, &expires)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && expires <= unixNano(s.now()) {
			return state.ErrNotFound
		}
		if err != nil {
			return err
		}
		if cur, err = decodeRecord(k, st, body, hist); err != nil {
			return err
		}
		next, err := runUpdate(cur, fn)
		if err != nil {
			fnErr = err
			return err
		}
		if err := s.writerHolds(octx, tx, k, next.State); err != nil {
			return err
		}
		h := state.StoredHistory(hist, encodeEvents(next.History), sameBytes)
		if _, err := tx.Exec(octx, sqlUpdate, recordArgs(next, h)...); err != nil {
			return err
		}
		next.History, err = decodeHistory(h)
		stored = next
		return err
	})
	switch {
	case fnErr != nil:
		return cur, fnErr // the record unchanged
	case errors.Is(err, state.ErrNotFound):
		return nil, err
	case err != nil:
		if ctx.Err() == nil {
			s.health.reportWrite(err)
		}
		return nil, wrapErr(err)
	}
	s.health.reportWrite(nil)
	return stored, nil
}

// decodeHistory returns the events of an encoded history.
func decodeHistory(h [][]byte) ([]state.Event, error) {
	if len(h) == 0 {
		return nil, nil
	}
	out := make([]state.Event, len(h))
	for i := range h {
		if err := decodeEvent(h[i], &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runUpdate calls fn on a copy of cur. A panic in fn becomes an error, and
// so does a change of Key.
func runUpdate(cur *state.Record, fn func(*state.Record) error) (next *state.Record, err error) {
	next = cur.Clone()
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("pgstore: Update(%v) function panicked: %v", cur.Key, p)
		}
	}()
	if err := fn(next); err != nil {
		return nil, err
	}
	if next.Key != cur.Key {
		return nil, fmt.Errorf("pgstore: Update(%v) function changed the key to %v", cur.Key, next.Key)
	}
	return next, nil
}

// Get implements state.Store. The reads waiting at a moment are one
// statement.
func (s *Store) Get(ctx context.Context, k state.Key) (*state.Record, error) {
	r, err := s.readKey(ctx, k, false)
	if err != nil {
		return nil, err
	}
	if !r.live(s.now()) {
		return nil, state.ErrNotFound
	}
	return decodeRecord(k, r.st, r.body, r.hist)
}

// read runs a read bounded by Options.Timeout, after the back-off gate;
// no row is state.ErrNotFound.
func (s *Store) read(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	if err := s.health.gate(); err != nil {
		return err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	err := fn(octx)
	if errors.Is(err, pgx.ErrNoRows) {
		err = state.ErrNotFound
	}
	s.reportRead(ctx, err)
	return wrapErr(err)
}

// reportRead tells the back-off about the outcome of an operation on the
// caller's ctx, unless the caller's own context ended it.
func (s *Store) reportRead(ctx context.Context, err error) {
	if ctx.Err() == nil {
		s.health.report(err)
	}
}

// byIndex returns the live record matching where (its arguments from $2;
// $1 is now) written last.
func (s *Store) byIndex(ctx context.Context, where string, args ...any) (*state.Record, error) {
	var rec *state.Record
	err := s.read(ctx, func(ctx context.Context) error {
		q := `SELECT ` + readColumns + ` FROM records WHERE expires_ns + 0 > $1 AND ` + where + ` ORDER BY wseq DESC LIMIT 1`
		var err error
		rec, err = scanRow(s.pool.QueryRow(ctx, q, append([]any{unixNano(s.now())}, args...)...))
		return err
	})
	return rec, err
}

func scanRow(row pgx.Row) (*state.Record, error) {
	var (
		account, key, segment, body []byte
		st                          string
		hist                        [][]byte
	)
	if err := row.Scan(&account, &key, &segment, &st, &body, &hist); err != nil {
		return nil, err
	}
	return decodeRecord(state.Key{Account: string(account), Key: string(key), Segment: string(segment)}, st, body, hist)
}

// ByMessageID implements state.Store.
func (s *Store) ByMessageID(ctx context.Context, upstream, id string) (*state.Record, error) {
	if id == "" {
		return s.notFound(ctx)
	}
	return s.byIndex(ctx, `upstream = $2 AND match_id = $3`, col(upstream), col(id))
}

// ByProxyID implements state.Store.
func (s *Store) ByProxyID(ctx context.Context, account, id string) (*state.Record, error) {
	if id == "" {
		return s.notFound(ctx)
	}
	return s.byIndex(ctx, `account = $2 AND proxy_id = $3`, col(account), col(id))
}

// notFound is the answer to a lookup that can match nothing: ErrNotFound,
// or ErrClosed on a closed store.
func (s *Store) notFound(ctx context.Context) (*state.Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	s.exit()
	return nil, state.ErrNotFound
}

// UnknownByAddr implements state.Store.
func (s *Store) UnknownByAddr(ctx context.Context, upstream string, h [16]byte) ([]*state.Record, error) {
	if h == ([16]byte{}) || upstream == "" {
		_, err := s.notFound(ctx)
		if errors.Is(err, state.ErrNotFound) {
			err = nil
		}
		return nil, err
	}
	var out []*state.Record
	err := s.read(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM records
			WHERE state = 'unknown' AND upstream = $1 AND addr_hash = $2 AND expires_ns + 0 > $3`,
			col(upstream), h[:], unixNano(s.now()))
		if err != nil {
			return err
		}
		out, err = collect(rows)
		return err
	})
	return out, err
}

// collect decodes rows.
func collect(rows pgx.Rows) ([]*state.Record, error) {
	defer rows.Close()
	var out []*state.Record
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// scanPage is how many records Scan and ScanState read per query.
const scanPage = 1000

// sqlCountStates counts the live records by state over at most $2 of
// them (n <= $2), and says whether there are more (all > $2). The expiry
// is tested as an expression (+ 0): the records are read in the table's
// order, a count needs no index.
const sqlCountStates = `SELECT state, count(*) FILTER (WHERE n <= $2::bigint), count(*)
	FROM (SELECT state, row_number() OVER () AS n
		FROM (SELECT state FROM records WHERE expires_ns + 0 > $1 LIMIT $2::bigint + 1) l) x
	GROUP BY state`

var _ state.StateCounter = (*Store)(nil)

// CountStates implements state.StateCounter: PostgreSQL counts the live
// records by state, over at most limit of them, and sends the counts. The
// count is one statement, which may take a while over a million records
// on a busy database: it has countTimeout, not the store's Timeout, and a
// count that runs out of time says nothing of the database's health (the
// store's other operations do).
func (s *Store) CountStates(ctx context.Context, limit int) (map[state.SubmitState]int, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.exit()
	if err := s.health.gate(); err != nil {
		return nil, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, max(countTimeout, s.opts.Timeout))
	defer cancel()
	counts, complete, err := countStates(cctx, s.pool, unixNano(s.now()), limit)
	if err != nil {
		if cctx.Err() == nil {
			s.reportRead(ctx, err)
		}
		return nil, false, wrapErr(err)
	}
	return counts, complete, nil
}

// countStates runs sqlCountStates on pool: the live records at now by
// state, over at most limit of them, and whether none was left out.
func countStates(ctx context.Context, pool *pgxpool.Pool, now int64, limit int) (map[state.SubmitState]int, bool, error) {
	limit = min(limit, math.MaxInt64-1)
	rows, err := pool.Query(ctx, sqlCountStates, now, int64(limit))
	if err != nil {
		return nil, false, err
	}
	counts := make(map[state.SubmitState]int)
	var name string
	var counted, read, all int64
	_, err = pgx.ForEachRow(rows, []any{&name, &counted, &read}, func() error {
		if counted > 0 {
			counts[state.SubmitState(name)] = int(counted)
		}
		all += read
		return nil
	})
	return counts, all <= int64(limit), err
}

// countTimeout bounds a CountStates.
const countTimeout = time.Minute

// Scan implements state.Store. It reads the records in pages in key order,
// each page a query of its own, and calls fn between queries.
func (s *Store) Scan(ctx context.Context, fn func(*state.Record) bool) error {
	return s.scan(ctx, "", fn)
}

// ScanState implements Store.ScanState: Scan restricted to the live
// records in state st. Records in state sent have an index of their own.
func (s *Store) ScanState(ctx context.Context, st state.SubmitState, fn func(*state.Record) bool) error {
	return s.scan(ctx, textCol(string(st)), fn)
}

func (s *Store) scan(ctx context.Context, st string, fn func(*state.Record) bool) error {
	var after *state.Key
	for {
		page, err := s.scanPage(ctx, st, after)
		if err != nil {
			return err
		}
		for _, r := range page {
			if !fn(r) {
				return nil
			}
		}
		if len(page) < scanPage {
			return nil
		}
		after = &page[len(page)-1].Key
	}
}

func (s *Store) scanPage(ctx context.Context, st string, after *state.Key) ([]*state.Record, error) {
	q := `SELECT ` + readColumns + ` FROM records WHERE expires_ns + 0 > $1`
	args := []any{unixNano(s.now())}
	if st != "" {
		args = append(args, st)
		q += ` AND state = $2`
	}
	if after != nil {
		n := len(args)
		q += fmt.Sprintf(` AND (account, key, segment) > ($%d, $%d, $%d)`, n+1, n+2, n+3)
		args = append(args, col(after.Account), col(after.Key), col(after.Segment))
	}
	q += fmt.Sprintf(` ORDER BY account, key, segment LIMIT %d`, scanPage)
	var page []*state.Record
	err := s.read(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		page, err = collect(rows)
		return err
	})
	return page, err
}
