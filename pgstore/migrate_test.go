package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// A schema of version 3 (with the index of records by session and
// sequence, which nothing reads) migrates to this build's version: the
// index is dropped, the status shows the new version, and a record keeps
// the session and sequence it was journaled with.
func TestMigrateDropsTheJournalIndex(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	ms, err := loadMigrations()
	if err != nil || len(ms) < 4 || ms[3].name != "0004_drop_journal_index" {
		t.Fatalf("loadMigrations = %d migrations, %v; want 0004_drop_journal_index the 4th", len(ms), err)
	}
	schemaAt(t, dsn, schema, ms[:3])
	hasIndex := func() bool {
		t.Helper()
		return exec(t, dsn, `SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'records_session'`, schema).rows == 1
	}
	if !hasIndex() {
		t.Fatalf("schema at version 3 has no index records_session; the test builds the wrong schema")
	}

	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatalf("Migrate from version 3 = %v", err)
	}
	if hasIndex() {
		t.Errorf("index records_session still there after Migrate; want it dropped")
	}
	if st, err := ReadStatus(bg, dsn, schema); err != nil || st.Version != SchemaVersion() || st.Version < 4 {
		t.Errorf("ReadStatus after Migrate = %+v, %v; want version %d (≥ 4)", st, err, SchemaVersion())
	}
	s := openTest(t, Options{DSN: dsn, Schema: schema, Now: func() time.Time { return t0 }})
	rec := sentRecord(t0, "k1", "test-1/1", 7)
	mustCreate(t, s, rec)
	if got := mustGet(t, s, rec.Key); got.Upstream != "smsc" || got.Session != "smsc/1" || got.Sequence != 7 {
		t.Errorf("Get(%v) journaled on %q %q #%d; want smsc smsc/1 #7", rec.Key, got.Upstream, got.Session, got.Sequence)
	}
}

// A migration whose lock waits behind a long read of the table does not
// stall the other statements on that table for long: its statements wait
// at most half a second for a lock, and it is run again after a pause, and
// succeeds once the read has ended. Before, 0005's DROP INDEX waited 10 s
// (0004's without limit), and every instance's reads and writes of the
// records queued behind it (from review).
func TestAMigrationWaitingForALockDoesNotStallTheTablesOtherStatements(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	atVersion4(t, dsn, schema)
	q := pgx.Identifier{schema}.Sanitize()
	// A long read holds the records table.
	_, reader := lockRows(t, dsn, `SELECT count(*) FROM `+q+`.records`)
	migrated := make(chan error, 1)
	go func() { migrated <- Migrate(bg, dsn, schema) }()
	testkit.Eventually(t, 30*time.Second, func() bool {
		return exec(t, dsn, `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%records_expir%' AND pid <> pg_backend_pid()`).rows > 0
	}, "the migration never waited for the records table's lock")
	// Another instance's statement on the table, with a time limit far
	// above the migration's lock wait and far below the old one.
	other, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(bg)
	if _, err := other.Exec(bg, `SET statement_timeout = '4s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(bg, `SELECT count(*) FROM `+q+`.records`); err != nil {
		t.Errorf("a read of the records while the migration waits for its lock = %v; want it served", err)
	}
	if err := reader.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatalf("Migrate once the long read ended = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Migrate did not end within a minute of the long read's end")
	}
	if st, err := ReadStatus(bg, dsn, schema); err != nil || st.Version != SchemaVersion() {
		t.Errorf("ReadStatus after Migrate = %+v, %v; want version %d", st, err, SchemaVersion())
	}
}

// schemaAt builds schema with migrations ms applied (an older version's).
func schemaAt(t *testing.T, dsn, schema string, ms []migration) {
	t.Helper()
	conn, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(bg) })
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(bg, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE `+q+`.schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := apply(bg, conn, schema, m); err != nil {
			t.Fatal(err)
		}
	}
}
