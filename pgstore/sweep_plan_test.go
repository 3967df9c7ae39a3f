package pgstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// planNode is the part of EXPLAIN (FORMAT JSON) the tests read.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Rechecks float64    `json:"Rows Removed by Index Recheck"`
	Plans    []planNode `json:"Plans"`
}

// walk calls fn for n and every node under it.
func (n *planNode) walk(fn func(*planNode)) {
	fn(n)
	for i := range n.Plans {
		n.Plans[i].walk(fn)
	}
}

// explainSweep runs sql after sqlIndexScans, as the maintenance does, under
// EXPLAIN (ANALYZE) in a transaction it rolls back, and returns the plan.
func explainSweep(t *testing.T, s *Store, sql string, args ...any) planNode {
	t.Helper()
	return explainAfter(t, s, sqlIndexScans, sql, args...)
}

// explainAfter is explainSweep with settings of the caller's (the
// statement the store runs before sql in its batch).
func explainAfter(t *testing.T, s *Store, settings, sql string, args ...any) planNode {
	t.Helper()
	conn, err := pgx.Connect(bg, s.opts.DSN)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(bg)
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	if _, err := tx.Exec(bg, `SELECT set_config('search_path', $1, true)`, pgx.Identifier{s.opts.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, settings); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := tx.QueryRow(bg, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&out); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	return plans[0].Plan
}

// rowsRead is how many rows of table the plan's nodes read: those they
// returned and those their conditions turned down.
func rowsRead(p planNode, table string) float64 {
	var n float64
	p.walk(func(x *planNode) {
		if x.Relation == table {
			n += (x.Rows + x.Filtered + x.Rechecks) * max(x.Loops, 1)
		}
	})
	return n
}

// fillRecords inserts n records of account acct straight into the records
// table (the sweeps read only their columns), expiring at expires.
func fillRecords(t *testing.T, s *Store, acct, st string, n int, expires time.Time) {
	t.Helper()
	exec(t, s.opts.DSN, `INSERT INTO `+s.opts.Schema+`.records
		(account, key, segment, state, owner_instance, expires_ns, upstream, seq, body, history, wseq)
		SELECT $1::bytea, convert_to('k' || g, 'UTF8'), ''::bytea, $2, 'gone', $3, ''::bytea, g, ''::bytea, '{}', g
		FROM generate_series(1, $4::int) g`, []byte(acct), st, unixNano(expires), n)
}

// The expiry sweep reads the expired rows, not the table: a store holds
// every record of its retention (hours of traffic), and the maintenance
// sweeps it every few seconds on every instance. It read all of it.
func TestTheExpirySweepReadsOnlyTheExpiredRows(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	const live, expired = 5000, 20
	fillRecords(t, s, "live", "accepted", live, c.Now().Add(72*time.Hour))
	fillRecords(t, s, "old", "accepted", expired, c.Now().Add(time.Minute))
	c.Advance(time.Minute)

	if err := s.collect(bg); err != nil {
		t.Fatalf("collect = %v", err)
	}
	count := func(acct string) int64 {
		return exec(t, s.opts.DSN, `SELECT 1 FROM `+s.opts.Schema+`.records WHERE account = $1`, []byte(acct)).rows
	}
	if got := count("old"); got != 0 {
		t.Errorf("%d expired records left after the sweep; want 0", got)
	}
	if got := count("live"); got != live {
		t.Errorf("%d live records left after the sweep; want %d", got, live)
	}
	s.Close() // its connections report their statistics as they end
	testkit.Eventually(t, 10*time.Second, func() bool {
		scans, _ := indexStats(t, s, "records_expiry")
		return scans > 0
	}, "the sweep did not use the expiry index")

	// What a sweep reads, as EXPLAIN ANALYZE counts it.
	fillRecords(t, s, "older", "accepted", expired, c.Now())
	plan := explainSweep(t, s, sqlSweep("records"), unixNano(c.Now()))
	if got := rowsRead(plan, "records"); got > 4*expired {
		t.Errorf("the sweep read %.0f rows of records to delete %d expired among %d; want at most %d", got, expired, live+expired, 4*expired)
	}
}

// indexStats returns the index scans of the store's index name and the
// table rows they fetched one by one (a bitmap scan fetches none).
func indexStats(t *testing.T, s *Store, name string) (scans, fetched int64) {
	t.Helper()
	conn, err := pgx.Connect(bg, s.opts.DSN)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(bg)
	if err := conn.QueryRow(bg, `SELECT coalesce(sum(idx_scan), 0)::bigint, coalesce(sum(idx_tup_fetch), 0)::bigint
		FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = $2`, s.opts.Schema, name).Scan(&scans, &fetched); err != nil {
		t.Fatalf("reading the statistics of %s: %v", name, err)
	}
	return scans, fetched
}

// Taking over the sent records of dead instances reads the records_sent
// index entry by entry. The index keeps an entry for every record created
// since the last vacuum, most of them no longer sent: a bitmap scan visits
// every such row at every sweep, an index scan marks the entries of rows
// no one can see any more as dead, so that later sweeps skip them.
func TestTheDeadOwnerSweepReadsTheSentIndexEntryByEntry(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	fillRecords(t, s, "done", "sent", 3000, c.Now().Add(time.Hour))
	// The statistics lag the table, as they do under load: they still see
	// the records sent.
	exec(t, s.opts.DSN, `ANALYZE `+s.opts.Schema+`.records`)
	exec(t, s.opts.DSN, `UPDATE `+s.opts.Schema+`.records SET state = 'accepted'`)
	fillRecords(t, s, "orphan", "sent", 2, c.Now().Add(time.Hour))

	if n, err := s.ExpireDeadOwners(bg); err != nil || n != 2 {
		t.Errorf("ExpireDeadOwners = %d, %v; want the 2 sent records of the dead instance", n, err)
	}
	s.Close() // its connections report their statistics as they end
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, fetched := indexStats(t, s, "records_sent")
		return fetched >= 2
	}, "the takeover fetched no record through an index scan of records_sent")

	ev := state.Event{At: c.Now(), State: state.Unknown, Note: "test"}
	plan := explainSweep(t, s, sqlExpireDead, unixNano(c.Now()), [][]byte{encodeEvent(&ev)}, "test-1")
	var scans []string
	plan.walk(func(x *planNode) {
		if x.Relation == "records" && strings.HasSuffix(x.Type, "Scan") {
			scans = append(scans, fmt.Sprintf("%s %s", x.Type, x.Index))
		}
	})
	for _, sc := range scans {
		if sc != "Index Scan records_sent" {
			t.Errorf("the sweep reads records by %q; want only index scans of records_sent (all: %q)", sc, scans)
		}
	}
}

// atVersion4 migrates schema, then takes it back to version 4 (a BRIN
// index on the expiry, no btree), as the previous build left stores.
func atVersion4(t *testing.T, dsn, schema string) {
	t.Helper()
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, `DROP INDEX `+schema+`.records_expiry`)
	exec(t, dsn, `CREATE INDEX records_expires ON `+schema+`.records USING brin (expires_ns)`)
	exec(t, dsn, `DELETE FROM `+schema+`.schema_migrations WHERE version = 5`)
}

// The upgrade to the expiry btree accepts the index an operator built
// beforehand without blocking writes (CREATE INDEX CONCURRENTLY), and
// drops the BRIN index it replaces.
func TestTheExpiryIndexMigrationKeepsAnIndexBuiltBeforehand(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	atVersion4(t, dsn, schema)

	exec(t, dsn, `CREATE INDEX CONCURRENTLY records_expiry ON `+schema+`.records (expires_ns)`)
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatalf("Migrate with the index built beforehand = %v", err)
	}
	indexes := func(name string) int64 {
		return exec(t, dsn, `SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = $2`, schema, name).rows
	}
	if indexes("records_expiry") != 1 || indexes("records_expires") != 0 {
		t.Errorf("after the migration: records_expiry %d, records_expires %d; want the btree alone",
			indexes("records_expiry"), indexes("records_expires"))
	}
}

// A concurrent build that failed leaves an invalid index under the name;
// the migration builds it again instead of taking it for the index (the
// sweep would read the table again, without its BRIN index either).
func TestTheExpiryIndexMigrationRebuildsAnIndexLeftInvalid(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	atVersion4(t, dsn, schema)

	// A build that gives up waiting for a transaction writing the table.
	writer, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(bg)
	tx, err := writer.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `INSERT INTO `+schema+`.records (account, key, segment, state, owner_instance, expires_ns, upstream, seq, body, history, wseq)
		VALUES ('a', 'k', '', 'accepted', '', 1, '', 0, '', '{}', 0)`); err != nil {
		t.Fatal(err)
	}
	builder, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer builder.Close(bg)
	if _, err := builder.Exec(bg, `SET statement_timeout = '300ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Exec(bg, `CREATE INDEX CONCURRENTLY records_expiry ON `+schema+`.records (expires_ns)`); err == nil {
		t.Fatal("the concurrent build finished beside an open writer; want it cancelled, leaving an invalid index")
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}

	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatalf("Migrate with an invalid index left by a failed build = %v", err)
	}
	var valid bool
	if err := builder.QueryRow(bg, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`,
		schema+".records_expiry").Scan(&valid); err != nil || !valid {
		t.Errorf("records_expiry valid = %v, %v after the migration; want a valid index", valid, err)
	}
}

// The expiry index serves the expiry sweep alone. Statistics lag the
// table under load: when they say that every record has expired, a
// receipt's lookup by message id, which tests the expiry too, read every
// live record through the expiry index instead of probing its own.
func TestALookupByMessageIDNeverReadsThroughTheExpiryIndex(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	fillRecords(t, s, "bulk", "accepted", 5000, c.Now().Add(-time.Hour))
	exec(t, s.opts.DSN, `ANALYZE `+s.opts.Schema+`.records`) // every record expired, as the planner sees them
	exec(t, s.opts.DSN, `UPDATE `+s.opts.Schema+`.records SET expires_ns = $1, match_id = key`, unixNano(c.Now().Add(72*time.Hour)))

	plan := explainAfter(t, s, sqlIndexProbes, sqlReadByIDMany, [][]byte{{}}, [][]byte{[]byte("k42")}, unixNano(c.Now()))
	plan.walk(func(x *planNode) {
		if x.Index == "records_expiry" {
			t.Errorf("the lookup by message id reads records through %s (%s); want its own index", x.Index, x.Type)
		}
	})
	if got := rowsRead(plan, "records"); got > 10 {
		t.Errorf("the lookup of one message id read %.0f records; want the one", got)
	}
}

// A batch of creates alone finds the keys it takes by probing the primary
// key, like every other batch: on a new connection PostgreSQL plans the
// statement for its arguments, and with sequential scans allowed it read
// the whole table (twice, once the expiry could not use its index) for
// each of its first executions, when a burst of fresh submits opens them.
func TestABatchOfCreatesNeverReadsTheWholeTable(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	fillRecords(t, s, "bulk", "accepted", 50000, c.Now().Add(72*time.Hour))
	fillRecords(t, s, "old", "accepted", 200, c.Now().Add(-time.Minute))
	exec(t, s.opts.DSN, `ANALYZE `+s.opts.Schema+`.records`)
	// The statistics arrive as each connection ends: wait for the rows
	// inserted so far, and count the whole-table reads from there (the
	// migration's index builds read the table too).
	stats := func(inserted int64) (seqScans int64) {
		testkit.Eventually(t, 10*time.Second, func() bool {
			var n int64
			conn, err := pgx.Connect(bg, s.opts.DSN)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(bg)
			if err := conn.QueryRow(bg, `SELECT seq_scan, n_tup_ins FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'records'`,
				s.opts.Schema).Scan(&seqScans, &n); err != nil {
				t.Fatal(err)
			}
			return n >= inserted
		}, "the statistics of the rows inserted did not arrive")
		return seqScans
	}
	before := stats(50200)

	const n = 3000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, created, err := s.Create(bg, sentRecord(c.Now(), fmt.Sprint("fresh-", i), "test-1/1", uint32(i))); err != nil || !created {
				t.Errorf("Create = %v, %v", created, err)
			}
		})
	}
	wg.Wait()
	s.Close() // its connections report their statistics as they end
	if got := stats(50200+n) - before; got != 0 {
		t.Errorf("records was read whole %d times for %d creates; want its primary key probed", got, n)
	}
}
