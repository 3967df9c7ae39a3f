package pgstore

import (
	"encoding/hex"
	"github.com/smppproxy/smppproxy/internal/varcodec"
	"strings"

	"github.com/jackc/pgx/v5"

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
	// dupOf: an earlier Create of the same key in the same batch, whose
	// outcome decides this one's.
	dupOf *createOp
}

// replaceOp is one Replace in a batch.
type replaceOp struct {
	args    []any // recordArgs with the history to write when the row is gone
	rewrite bool
	added   [][]byte
}

// The input of a multi-row write: the columns of recordArgs as arrays,
// the histories as bytea[] literals (an array of arrays cannot vary in
// length), numbered in order.
const inputColumns = `account, key, segment, state, owner_instance, expires_ns, upstream,
	match_id, session, seq, proxy_id, addr_hash, body, history`

const inputRows = `SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::text[], $5::text[],
	$6::int8[], $7::bytea[], $8::bytea[], $9::bytea[], $10::int8[], $11::bytea[], $12::bytea[],
	$13::bytea[], $14::text[]) WITH ORDINALITY AS t(` + inputColumns + `, n)`

// sqlCreateMany inserts the records whose keys no live record holds (an
// expired one is replaced) and returns the keys it wrote (state NULL),
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
const sqlCreateMany = `WITH input AS (` + inputRows + `),
	ins AS (
		INSERT INTO records (` + recordColumns + `)
		SELECT account, key, segment, state, owner_instance, expires_ns, upstream, match_id, session, seq,
			proxy_id, addr_hash, body, history::bytea[], nextval('record_wseq') FROM input ORDER BY n
		ON CONFLICT (account, key, segment) DO NOTHING
		RETURNING account, key, segment),
	upd AS (
		UPDATE records r SET state = i.state, owner_instance = i.owner_instance, expires_ns = i.expires_ns,
			upstream = i.upstream, match_id = i.match_id, session = i.session, seq = i.seq,
			proxy_id = i.proxy_id, addr_hash = i.addr_hash, body = i.body, history = i.history::bytea[],
			wseq = nextval('record_wseq')
		FROM input i
		WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment) AND r.expires_ns <= $15
			AND NOT EXISTS (SELECT 1 FROM ins WHERE (ins.account, ins.key, ins.segment) = (i.account, i.key, i.segment))
		RETURNING r.account, r.key, r.segment)
	SELECT account, key, segment, NULL::text AS state, NULL::bytea AS body, NULL::bytea[] AS history FROM ins
	UNION ALL SELECT account, key, segment, NULL, NULL, NULL FROM upd
	UNION ALL SELECT r.account, r.key, r.segment, r.state, r.body, r.history
		FROM records r JOIN input i ON (r.account, r.key, r.segment) = (i.account, i.key, i.segment)
		WHERE r.expires_ns > $15
			AND NOT EXISTS (SELECT 1 FROM ins WHERE (ins.account, ins.key, ins.segment) = (i.account, i.key, i.segment))`

// sqlReplaceMany updates the records (the history grows by added, capped,
// unless rewrite) and inserts those whose row is gone.
const sqlReplaceMany = `WITH input AS (SELECT * FROM (` + inputRows + `) t0
		JOIN unnest($15::bool[], $16::text[]) WITH ORDINALITY AS t1(rewrite, added, n) USING (n)),
	upd AS (
		UPDATE records r SET state = i.state, owner_instance = i.owner_instance, expires_ns = i.expires_ns,
			upstream = i.upstream, match_id = i.match_id, session = i.session, seq = i.seq,
			proxy_id = i.proxy_id, addr_hash = i.addr_hash, body = i.body, wseq = nextval('record_wseq'),
			history = CASE WHEN i.rewrite THEN i.history::bytea[]
				ELSE cap_history(r.history || i.added::bytea[], 64) END
		FROM input i
		WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment)
		RETURNING r.account, r.key, r.segment)
	INSERT INTO records (` + recordColumns + `)
	SELECT account, key, segment, state, owner_instance, expires_ns, upstream, match_id, session, seq,
		proxy_id, addr_hash, body, history::bytea[], nextval('record_wseq') FROM input i
	WHERE NOT EXISTS (SELECT 1 FROM upd WHERE (upd.account, upd.key, upd.segment) = (i.account, i.key, i.segment))
	ORDER BY n
	ON CONFLICT DO NOTHING`

// columns turns rows of recordArgs into the 14 array arguments of
// inputRows.
func columns(rows [][]any) []any {
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
			out[c] = a
		case 13: // history
			a := make([]string, len(rows))
			for i, r := range rows {
				a[i] = byteaArray(r[c].([][]byte))
			}
			out[c] = a
		default: // bytea, NULL when nil
			a := make([][]byte, len(rows))
			for i, r := range rows {
				a[i] = r[c].([]byte)
			}
			out[c] = a
		}
	}
	return out
}

// byteaArray is the text form of a bytea[] holding h.
func byteaArray(h [][]byte) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, e := range h {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"\\x`)
		sb.WriteString(hex.EncodeToString(e))
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

// queueCreates adds the batch's Creates (sorted by key) as one statement;
// a second Create of a key in the batch takes the first one's outcome.
func queueCreates(b *pgx.Batch, ops []*createOp) {
	first := make(map[state.Key]*createOp, len(ops))
	var uniq []*createOp
	var rows [][]any
	for _, op := range ops {
		op.created, op.existing, op.dupOf = false, nil, nil
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
	args := append(columns(rows), now)
	b.Queue(sqlCreateMany, args...).Query(func(rs pgx.Rows) error {
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
				existing, err := decodeRecord(k, *st, body, hist)
				if err != nil {
					return err
				}
				op.existing = existing
			}
		}
		return rs.Err()
	})
}

// settle gives a second Create of a key in a batch its outcome: the first
// one's record (a copy) when the first created it, the holder the first
// found, else neither (Create reads the holder).
func (op *createOp) settle() {
	switch f := op.dupOf; {
	case f == nil:
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
func queueReplaces(b *pgx.Batch, ops []*replaceOp) {
	seen := make(map[string]bool, len(ops))
	var rows [][]any
	var rewrite []bool
	var added []string
	var later []*replaceOp
	for _, op := range ops {
		k := string(varcodec.AppendString(varcodec.AppendString(varcodec.AppendString(nil, string(op.args[0].([]byte))), string(op.args[1].([]byte))), string(op.args[2].([]byte))))
		if seen[k] {
			later = append(later, op)
			continue
		}
		seen[k] = true
		rows = append(rows, op.args)
		rewrite = append(rewrite, op.rewrite)
		added = append(added, byteaArray(op.added))
	}
	if len(rows) > 0 {
		b.Queue(sqlReplaceMany, append(columns(rows), rewrite, added)...)
	}
	for _, op := range later {
		b.Queue(sqlReplace, append(op.args, op.rewrite, op.added)...)
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
// sequence expected, and returns the rows it wrote.
const sqlCASMany = `WITH input AS (SELECT * FROM (` + inputRows + `) t0
		JOIN unnest($15::int8[], $16::bool[], $17::text[]) WITH ORDINALITY AS t1(expect, append, added, n) USING (n))
	UPDATE records r SET state = i.state, owner_instance = i.owner_instance, expires_ns = i.expires_ns,
		upstream = i.upstream, match_id = i.match_id, session = i.session, seq = i.seq,
		proxy_id = i.proxy_id, addr_hash = i.addr_hash, body = i.body,
		history = CASE WHEN i.append THEN cap_history(r.history || i.added::bytea[], 64) ELSE i.history::bytea[] END,
		wseq = nextval('record_wseq')
	FROM input i
	WHERE (r.account, r.key, r.segment) = (i.account, i.key, i.segment) AND r.wseq = i.expect
	RETURNING i.n`

// queueCAS adds the batch's conditional writes as one statement. Of two
// for one key, at most one applies (they expect the same sequence).
func queueCAS(b *pgx.Batch, ops []*casOp) {
	if len(ops) == 0 {
		return
	}
	rows := make([][]any, len(ops))
	expect := make([]int64, len(ops))
	appends := make([]bool, len(ops))
	added := make([]string, len(ops))
	for i, op := range ops {
		op.applied = false
		rows[i], expect[i], appends[i], added[i] = op.args, op.expect, op.append, byteaArray(op.added)
	}
	b.Queue(sqlCASMany, append(columns(rows), expect, appends, added)...).Query(func(rs pgx.Rows) error {
		defer rs.Close()
		for rs.Next() {
			var n int64
			if err := rs.Scan(&n); err != nil {
				return err
			}
			ops[n-1].applied = true
		}
		return rs.Err()
	})
}
