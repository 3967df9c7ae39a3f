package pgstore

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/smppproxy/smppproxy/state"
)

// A batch's Creates are one multi-row statement and its Replaces another:
// one statement per kind instead of one per request is what lets a batch
// of hundreds of writes cost little more than one.

// createOp is one Create in a batch. Its outcome: created, or neither
// when a live record holds the key (Create then reads it after the
// commit); a second Create of a key in the batch gets the first one's
// record as existing when the first created it.
type createOp struct {
	rec  *state.Record
	args []any // recordArgs
	now  int64

	created  bool
	existing *state.Record
	// err: the record holding the key could not be decoded (the batch
	// committed all the same: the other requests keep their outcomes), or
	// nothing was inserted because the lease is gone (explainRefusals).
	err error
	// dupOf: an earlier Create of the same key in the same batch, whose
	// outcome decides this one's.
	dupOf *createOp
}

// errNoAnswer: an enqueue the batch's statement returned no row for (its
// dedup key's marker vanished); the answer's row clears it.
var errNoAnswer = errors.New("pgstore: enqueue: no answer for the entry (its dedup key's marker vanished)")

// newCreateOp is the Create of rec decided at now (Unix nanoseconds).
func newCreateOp(rec *state.Record, now int64) *createOp {
	return &createOp{rec: rec.Clone(), args: recordArgs(rec, state.CapHistory(encodeEvents(rec.History))), now: now}
}

// replaceOp is one Replace in a batch, of record key to state next:
// applied once the batch wrote it (the stored record was still the one
// its writer held, or gone); else err says why (explainRefusals).
type replaceOp struct {
	args               []any // recordArgs with the history to write when the row is gone
	rewrite            bool
	added              [][]byte
	oldState, oldOwner string // of the record the writer holds
	key                state.Key
	next               state.SubmitState
	applied            bool
	err                error
}

// The input of a multi-row write: the columns of recordArgs as arrays,
// numbered in order, but the history: an array of arrays cannot vary in
// length, so a row's history column is its range in the statement's flat
// array of events (events), which evSlice turns back into a bytea[].
const inputColumns = `account, key, segment, state, owner_instance, expires_ns, upstream,
	match_id, session, seq, proxy_id, addr_hash, body, history`

const inputRows = `SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::text[], $5::text[],
	$6::int8[], $7::bytea[], $8::bytea[], $9::bytea[], $10::int8[], $11::bytea[], $12::bytea[],
	$13::bytea[], $14::int8[]) WITH ORDINALITY AS t(` + inputColumns + `, n)`

// sqlCreateMany inserts the records whose keys no live record holds (an
// expired one is replaced) while this process holds its instance ($17,
// its token $18) and its lease (sqlHolds: most creates are journals,
// after which the submit is written upstream; the few others, an archive
// or a record of a submit no session took, need the lease all the same),
// and returns the keys it wrote (state NULL),
// and the live records that hold the others, as the statement found them
// (state set), so that a create finding its key taken needs no read after
// it; a key it returns neither way was taken by a transaction that
// committed meanwhile, which Create reads after the commit. The common
// case, a fresh key, costs the insert alone. A live
// record is neither locked nor written (ON CONFLICT DO NOTHING, and the
// replacement of expired ones only probes the keys the insert did not
// take), so a batch of creates that all find their key taken — retries
// an instance does not remember — writes nothing and commits without a
// WAL flush.
var sqlCreateMany = `WITH input AS (` + inputRows + `),
	ins AS (
		INSERT INTO records (` + recordColumns + `)
		SELECT account, key, segment, state, owner_instance, expires_ns, upstream, match_id, session, seq,
			proxy_id, addr_hash, body, ` + evSlice("history", 16) + `, nextval('record_wseq') FROM input
		WHERE ` + sqlHolds(17, 18, true) + `
		ORDER BY n
		ON CONFLICT (account, key, segment) DO NOTHING
		RETURNING account, key, segment),
	upd AS (
		UPDATE records r SET ` + recordSetFrom("i") + `, history = ` + evSlice("i.history", 16) + `,
			wseq = nextval('record_wseq')
		FROM input i
		WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment) AND r.expires_ns + 0 <= $15
			AND NOT EXISTS (SELECT 1 FROM ins WHERE (ins.account, ins.key, ins.segment) = (i.account, i.key, i.segment))
			AND ` + sqlHolds(17, 18, true) + `
		RETURNING r.account, r.key, r.segment)
	SELECT account, key, segment, NULL::text AS state, NULL::bytea AS body, NULL::bytea[] AS history FROM ins
	UNION ALL SELECT account, key, segment, NULL, NULL, NULL FROM upd
	UNION ALL SELECT r.account, r.key, r.segment, r.state, r.body, r.history
		FROM records r JOIN input i ON (r.account, r.key, r.segment) = (i.account, i.key, i.segment)
		WHERE r.expires_ns + 0 > $15
			AND NOT EXISTS (SELECT 1 FROM ins WHERE (ins.account, ins.key, ins.segment) = (i.account, i.key, i.segment))`

// sqlReplaceMany updates the records still as their writer holds them
// (sqlStillHeld: old_state, old_owner; the history grows by added, capped,
// unless rewrite), inserts those whose row is gone, while the writer still
// holds its instance and, for a journal, its lease (sqlWriterHolds: $20,
// $21), and returns the input rows it wrote: a record another instance
// changed meanwhile (it took the records of a lease that ran out) is left
// as it is.
var sqlReplaceMany = `WITH input AS (SELECT * FROM (` + inputRows + `) t0
		JOIN unnest($15::bool[], $16::int8[], $17::text[], $18::text[]) WITH ORDINALITY AS t1(rewrite, added, old_state, old_owner, n) USING (n)),
	upd AS (
		UPDATE records r SET ` + recordSetFrom("i") + `, wseq = nextval('record_wseq'),
			history = CASE WHEN i.rewrite THEN ` + evSlice("i.history", 19) + `
				ELSE cap_history(r.history || ` + evSlice("i.added", 19) + `, 64) END
		FROM input i
		WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment) AND ` + sqlStillHeld("r", "i.state", "i.old_state", "i.old_owner") + `
			AND ` + sqlWriterHolds("i.state", 20, 21) + `
		RETURNING i.n),
	ins AS (
		INSERT INTO records (` + recordColumns + `)
		SELECT account, key, segment, state, owner_instance, expires_ns, upstream, match_id, session, seq,
			proxy_id, addr_hash, body, ` + evSlice("history", 19) + `, nextval('record_wseq') FROM input i
		WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.n = i.n) AND ` + sqlWriterHolds("i.state", 20, 21) + `
		ORDER BY n
		ON CONFLICT DO NOTHING
		RETURNING account, key, segment)
	SELECT n FROM upd
	UNION ALL SELECT i.n FROM ins JOIN input i ON (ins.account, ins.key, ins.segment) = (i.account, i.key, i.segment)`

// columns turns rows of recordArgs into the 14 array arguments of
// inputRows, their histories into ranges of ev; the bytea[] and int8[]
// ones already encoded (rawArray).
func columns(rows [][]any, ev *events) []any {
	out := make([]any, 14)
	for c := range 14 {
		switch c {
		case 3, 4: // text
			a := make([]string, len(rows))
			for i, r := range rows {
				a[i] = r[c].(string)
			}
			out[c] = a
		case 5, 9: // int8
			a := make([]int64, len(rows))
			for i, r := range rows {
				a[i] = r[c].(int64)
			}
			out[c] = int8Array(a)
		case 13: // history
			a := make([]int64, len(rows))
			for i, r := range rows {
				a[i] = ev.add(r[c].([][]byte))
			}
			out[c] = int8Array(a)
		default: // bytea, NULL when nil
			a := make([][]byte, len(rows))
			for i, r := range rows {
				a[i] = r[c].([]byte)
			}
			out[c] = byteaArray(a)
		}
	}
	return out
}

// events are the events (encoded) of a multi-row statement's rows, in one
// flat bytea[] argument: a row's events are a range of it. Sent in binary,
// they need neither the text form of a bytea[] per row nor its parsing.
type events struct{ flat [][]byte }

func newEvents() *events { return &events{flat: [][]byte{}} } // not NULL when empty

// arg is the flat array as a statement's argument: read it after every
// add.
func (ev *events) arg() *rawBytea { return byteaArray(ev.flat) }

// add appends h and returns its range: first<<32 | last, the 1-based
// bounds of evSlice (empty, last < first, when h is).
func (ev *events) add(h [][]byte) int64 {
	first := int64(len(ev.flat) + 1)
	ev.flat = append(ev.flat, h...)
	return first<<32 | int64(len(ev.flat))
}

// evSlice is the SQL of the bytea[] that range col (events.add) names in
// the flat array of events, argument $param.
func evSlice(col string, param int) string {
	return fmt.Sprintf("($%d::bytea[])[(%s >> 32)::int4 : (%s & 4294967295)::int4]", param, col, col)
}

// writer is the process writing a batch: its instance and its token (the
// arguments of sqlHolds).
type writer struct{ instance, token string }

// sqlWriter reads whether the process of token $2 still holds instance
// $1, and its lease.
var sqlWriter = `SELECT ` + sqlHolds(1, 2, true) + `, ` + sqlHolds(1, 2, false)

// sqlHolds is true while the process of token $tok still holds instance
// $inst and, with lease, its lease, on the database's clock.
func sqlHolds(inst, tok int, lease bool) string {
	c := fmt.Sprintf("EXISTS (SELECT 1 FROM instances WHERE id = $%d AND token = $%d", inst, tok)
	if lease {
		c += " AND lease_until > now()"
	}
	return c + ")"
}

// sqlWriterHolds is the condition of a record write of state next by the
// process of token $tok of instance $inst: a journal (next is sent, after
// which the submit is written upstream) needs the lease too; an outcome
// only the instance, so that the true answer of a submit written upstream
// before the lease lapsed is still stored.
func sqlWriterHolds(next string, inst, tok int) string {
	return fmt.Sprintf("CASE WHEN %s = 'sent' THEN %s ELSE %s END", next, sqlHolds(inst, tok, true), sqlHolds(inst, tok, false))
}

// sqlStillHeld is the condition that row r is still the record its writer
// holds (in state old and of owner instance owner): the same, or, for an
// outcome (next not sent) of a sent record, made unknown meanwhile by
// another instance that found the writer's lease run out and did nothing
// more with it (it would have changed the owner): the outcome is the
// truth that unknown stood for.
func sqlStillHeld(r, next, old, owner string) string {
	return fmt.Sprintf("%[1]s.owner_instance = %[4]s AND (%[1]s.state = %[3]s OR (%[3]s = 'sent' AND %[2]s <> 'sent' AND %[1]s.state = 'unknown'))", r, next, old, owner)
}

// queue adds a statement to b, its first rawArray asking for room for
// all of its arguments (reserveArgs).
func queue(b *pgx.Batch, sql string, args ...any) *pgx.QueuedQuery {
	reserveArgs(args)
	return b.Queue(sql, args...)
}

// queueCreates adds the batch's Creates (sorted by key) as one statement;
// a second Create of a key in the batch takes the first one's outcome.
func queueCreates(b *pgx.Batch, ops []*createOp, w writer) {
	first := make(map[state.Key]*createOp, len(ops))
	var uniq []*createOp
	var rows [][]any
	for _, op := range ops {
		op.created, op.existing, op.err, op.dupOf = false, nil, nil, nil
		if f, ok := first[op.rec.Key]; ok {
			op.dupOf = f
			continue
		}
		first[op.rec.Key] = op
		uniq = append(uniq, op)
		rows = append(rows, op.args)
	}
	if len(uniq) == 0 {
		return
	}
	now := uniq[0].now
	for _, op := range uniq {
		now = max(now, op.now) // the latest: a record expired by then is not "live"
	}
	ev := newEvents()
	cols := columns(rows, ev) // fills ev.flat: before it is read
	args := append(cols, now, ev.arg(), w.instance, w.token)
	queue(b, sqlCreateMany, args...).Query(func(rs pgx.Rows) error {
		defer rs.Close()
		for rs.Next() {
			var (
				account, key, segment, body []byte
				st                          *string
				hist                        [][]byte
			)
			if err := rs.Scan(&account, &key, &segment, &st, &body, &hist); err != nil {
				return err
			}
			k := state.Key{Account: string(account), Key: string(key), Segment: string(segment)}
			op := first[k]
			switch {
			case op == nil:
			case st == nil:
				op.created = true
			default:
				// An error here is this Create's, not the batch's: the
				// server commits the batch whatever its callbacks say.
				op.existing, op.err = decodeRecord(k, *st, body, hist)
			}
		}
		return rs.Err()
	})
}

// settle gives a second Create of a key in a batch its outcome: the first
// one's record (a copy) when the first created it, the holder the first
// found, else neither (Create reads the holder).
// unanswered reports whether the batch's statement returned nothing for
// op, the first Create of its key: neither inserted nor found live, and
// no error yet.
func (op *createOp) unanswered() bool {
	return op.dupOf == nil && !op.created && op.existing == nil && op.err == nil
}

func (op *createOp) settle() {
	switch f := op.dupOf; {
	case f == nil:
	case f.err != nil:
		op.err = f.err
	case f.created:
		op.existing = f.rec.Clone()
		op.existing.History = state.CapHistory(op.existing.History)
	case f.existing != nil:
		op.existing = f.existing.Clone()
	}
}

// queueReplaces adds the batch's Replaces (sorted by key) as one
// statement; a second Replace of a key in the batch follows as a statement
// of its own, so it applies after the first.
func queueReplaces(b *pgx.Batch, ops []*replaceOp, w writer) {
	seen := make(map[string]bool, len(ops))
	var rows [][]any
	var first []*replaceOp
	var rewrite []bool
	var added []int64
	var oldState, oldOwner []string
	var later []*replaceOp
	ev := newEvents()
	for _, op := range ops {
		op.applied, op.err = false, nil
		k := recordName(op.args[0].([]byte), op.args[1].([]byte), op.args[2].([]byte))
		if seen[k] {
			later = append(later, op)
			continue
		}
		seen[k] = true
		first = append(first, op)
		rows = append(rows, op.args)
		rewrite = append(rewrite, op.rewrite)
		added = append(added, ev.add(op.added))
		oldState, oldOwner = append(oldState, op.oldState), append(oldOwner, op.oldOwner)
	}
	if len(rows) > 0 {
		cols := columns(rows, ev) // fills ev.flat: before it is read
		queue(b, sqlReplaceMany, append(cols, rewrite, int8Array(added), oldState, oldOwner, ev.arg(), w.instance, w.token)...).Query(
			appliedRows(func(n int64) { first[n-1].applied = true }))
	}
	for _, op := range later {
		b.Queue(sqlReplace, append(op.args, op.rewrite, op.added, op.oldState, op.oldOwner, w.instance, w.token)...).Exec(func(tag pgconn.CommandTag) error {
			op.applied = tag.RowsAffected() == 1
			return nil
		})
	}
}

// casOp is the write of an Update that read the record outside the
// batch: it applies only if the record still has the write sequence read
// (nobody wrote it since). An append (AppendHot) adds its events to the
// stored history instead of writing the history whole: it read the first
// event only.
type casOp struct {
	args    []any // recordArgs with the history to store (none for an append)
	expect  int64 // wseq read
	append  bool
	added   [][]byte // an append's events
	applied bool
}

// sqlCASMany writes each input row whose record still has the write
// sequence expected, while its writer may write it (sqlWriterHolds: $19,
// token $20), and returns the rows it wrote. A row refused by the writer
// check goes to lockedUpdate like one another writer got in before, which
// says why.
var sqlCASMany = `WITH input AS (SELECT * FROM (` + inputRows + `) t0
		JOIN unnest($15::int8[], $16::bool[], $17::int8[]) WITH ORDINALITY AS t1(expect, append, added, n) USING (n))
	UPDATE records r SET ` + recordSetFrom("i") + `,
		history = CASE WHEN i.append THEN cap_history(r.history || ` + evSlice("i.added", 18) + `, 64)
			ELSE ` + evSlice("i.history", 18) + ` END,
		wseq = nextval('record_wseq')
	FROM input i
	WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment) AND r.wseq = i.expect
		AND ` + sqlWriterHolds("i.state", 19, 20) + `
	RETURNING i.n`

// queueCAS adds the batch's conditional writes as one statement. Of two
// for one key, at most one applies (they expect the same sequence).
func queueCAS(b *pgx.Batch, ops []*casOp, w writer) {
	if len(ops) == 0 {
		return
	}
	rows := make([][]any, len(ops))
	expect := make([]int64, len(ops))
	appends := make([]bool, len(ops))
	added := make([]int64, len(ops))
	ev := newEvents()
	for i, op := range ops {
		op.applied = false
		rows[i], expect[i], appends[i], added[i] = op.args, op.expect, op.append, ev.add(op.added)
	}
	cols := columns(rows, ev) // fills ev.flat: before it is read
	queue(b, sqlCASMany, append(cols, int8Array(expect), appends, int8Array(added), ev.arg(), w.instance, w.token)...).Query(
		appliedRows(func(n int64) { ops[n-1].applied = true }))
}

// appliedRows reads the rows of a multi-row write that returns the input
// row numbers (1-based) it applied, calling applied for each.
func appliedRows(applied func(n int64)) func(pgx.Rows) error {
	return func(rs pgx.Rows) error {
		defer rs.Close()
		for rs.Next() {
			var n int64
			if err := rs.Scan(&n); err != nil {
				return err
			}
			applied(n)
		}
		return rs.Err()
	}
}

// enqueueOp is one Enqueue, or EnqueueAppend, in a batch. Its outcome:
// the entry's seq, or dup and the seq of the live marker holding its
// dedup key; appended when its record change was made. A second op of one
// queue and dedup key in a batch is a duplicate of the first.
type enqueueOp struct {
	queue, dedup []byte // dedup nil: none
	expires      int64
	entry        []byte
	now          int64
	app          *recordAppend // EnqueueAppend's record change; nil none

	seq           int64
	dup, appended bool
	err           error // the statement did not answer for it
	dupOf         *enqueueOp
}

// recordAppend is the change EnqueueAppend makes to a record along with
// its entry: the record's columns (recordArgs, no history), the events
// appended and the write sequence read.
type recordAppend struct {
	args   []any
	added  [][]byte
	expect int64
}

// enqueueCTEs are the entries' part of a batch's enqueues, its arguments
// from $n+1 (queue, dedup key or NULL, expires_ns, encoded entry, now):
// m, the markers written (unless a live one holds the key; an expired one
// is replaced); fresh, the inputs n enqueued and their seq (a new
// marker's, or drawn for an entry without dedup key); e, their entries.
func enqueueCTEs(n int) string {
	return fmt.Sprintf(`input AS (
			SELECT * FROM unnest($%[1]d::bytea[], $%[2]d::bytea[], $%[3]d::int8[], $%[4]d::bytea[])
			WITH ORDINALITY AS t(queue, dedup, expires_ns, entry, n)),
		m AS (
			INSERT INTO queue_markers AS q (queue, dedup_key, seq, expires_ns)
			SELECT queue, dedup, nextval('queue_seq'), expires_ns FROM input WHERE dedup IS NOT NULL ORDER BY n
			ON CONFLICT (queue, dedup_key) DO UPDATE SET seq = EXCLUDED.seq, expires_ns = EXCLUDED.expires_ns
			WHERE q.expires_ns <= $%[5]d
			RETURNING queue, dedup_key, seq),
		fresh AS (
			SELECT i.n, m.seq FROM input i JOIN m ON m.queue = i.queue AND m.dedup_key = i.dedup
			UNION ALL SELECT n, nextval('queue_seq') FROM input WHERE dedup IS NULL),
		e AS (
			INSERT INTO queue_entries (seq, queue, expires_ns, entry)
			SELECT f.seq, i.queue, i.expires_ns, i.entry FROM fresh f JOIN input i USING (n))`,
		n+1, n+2, n+3, n+4, n+5)
}

// sqlDupMarkers answers for the inputs not enqueued: the live marker that
// holds their key. Enqueuing transactions being serialised (seqLockKey),
// it is one the statement sees.
const sqlDupMarkers = `SELECT i.n, q.seq, true, false FROM input i
	JOIN queue_markers q ON q.queue = i.queue AND q.dedup_key = i.dedup
	WHERE NOT EXISTS (SELECT 1 FROM fresh f WHERE f.n = i.n)`

// sqlEnqueueMany enqueues a batch's entries and answers for each (n,
// seq, dup, appended).
var sqlEnqueueMany = `WITH ` + enqueueCTEs(0) + `
	SELECT n, seq, false, false FROM fresh
	UNION ALL ` + sqlDupMarkers

// sqlEnqueueAppendMany is sqlEnqueueMany with records appended to: the
// input rows of inputRows ($1…$14), each with the input n of its entry
// ($15), the events it appends ($16) and the write sequence it read
// ($17); a record is written only when its entry is enqueued and it still
// has that write sequence (of two for one record, one is written).
var sqlEnqueueAppendMany = `WITH ` + enqueueCTEs(17) + `,
	rec AS (SELECT * FROM (` + inputRows + `) t0
		JOIN unnest($15::int8[], $16::int8[], $17::int8[]) WITH ORDINALITY AS t1(op, added, expect, n) USING (n)),
	u AS (
		UPDATE records r SET ` + recordSetFrom("x") + `,
			history = cap_history(r.history || ` + evSlice("x.added", 23) + `, 64), wseq = nextval('record_wseq')
		FROM rec x JOIN fresh f ON f.n = x.op
		WHERE (r.account, r.key, r.segment) = (x.account, x.key, x.segment) AND r.wseq = x.expect
		RETURNING x.op)
	SELECT n, seq, false, EXISTS (SELECT 1 FROM u WHERE u.op = fresh.n) FROM fresh
	UNION ALL ` + sqlDupMarkers

// queueEnqueues adds the batch's enqueues as one statement, and one
// notification per queue (delivered to the listeners when the batch's
// transaction commits; hex, as a queue name may hold any byte and a
// payload is text).
func queueEnqueues(b *pgx.Batch, ops []*enqueueOp, channel string) {
	if len(ops) == 0 {
		return
	}
	type markerKey struct{ queue, dedup string }
	first := make(map[markerKey]*enqueueOp, len(ops))
	var (
		uniq    []*enqueueOp
		queues  [][]byte
		dedups  [][]byte
		expires []int64
		entries [][]byte
		rows    [][]any
		recOp   []int64
		added   []int64
		expect  []int64
		ev      = newEvents()
		notify  []string
		named   = map[string]bool{}
		now     int64
	)
	for _, op := range ops {
		op.seq, op.dup, op.appended, op.err, op.dupOf = 0, false, false, nil, nil
		if op.dedup != nil {
			k := markerKey{string(op.queue), string(op.dedup)}
			if f, ok := first[k]; ok {
				op.dupOf = f
				continue
			}
			first[k] = op
		}
		uniq = append(uniq, op)
		queues, dedups = append(queues, op.queue), append(dedups, op.dedup)
		expires, entries = append(expires, op.expires), append(entries, op.entry)
		if op.app != nil {
			rows = append(rows, op.app.args)
			recOp = append(recOp, int64(len(uniq)))
			added, expect = append(added, ev.add(op.app.added)), append(expect, op.app.expect)
		}
		if !named[string(op.queue)] {
			named[string(op.queue)] = true
			notify = append(notify, hex.EncodeToString(op.queue))
		}
		now = max(now, op.now) // the latest: a marker expired by then is not "live"
	}
	q, args := sqlEnqueueMany, []any{byteaArray(queues), byteaArray(dedups), int8Array(expires), byteaArray(entries), now}
	if len(rows) > 0 {
		cols := columns(rows, ev) // fills ev.flat: before it is read
		q, args = sqlEnqueueAppendMany, append(append(append(cols, int8Array(recOp), int8Array(added), int8Array(expect)), args...), ev.arg())
	}
	for _, op := range uniq {
		op.err = errNoAnswer
	}
	queue(b, q, args...).Query(func(rs pgx.Rows) error {
		defer rs.Close()
		for rs.Next() {
			var (
				n, seq        int64
				dup, appended bool
			)
			if err := rs.Scan(&n, &seq, &dup, &appended); err != nil {
				return err
			}
			if n < 1 || int(n) > len(uniq) {
				return errors.New("pgstore: enqueue: answer for an entry not asked for")
			}
			op := uniq[n-1]
			op.seq, op.dup, op.appended, op.err = seq, dup, appended, nil
		}
		return rs.Err()
	})
	b.Queue(`SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`, channel, notify)
}

// settle gives a second op of a queue and dedup key in a batch its
// outcome: a duplicate of the first.
func (op *enqueueOp) settle() {
	if f := op.dupOf; f != nil {
		op.seq, op.dup, op.appended, op.err = f.seq, true, false, f.err
	}
}
