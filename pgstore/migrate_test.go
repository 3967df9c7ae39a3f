package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	conn, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(bg, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE `+q+`.schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:3] {
		if err := apply(bg, conn, schema, m); err != nil {
			t.Fatal(err)
		}
	}
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
