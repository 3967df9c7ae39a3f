package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/pgtest"
)

// The tests run against a real PostgreSQL (internal/pgtest): without
// SMPPPROXY_TEST_POSTGRES they skip, unless SMPPPROXY_REQUIRE_POSTGRES=1
// (CI), when they fail.
var bg = context.Background()

func testDSN(t testing.TB) string {
	t.Helper()
	return pgtest.DSN(t)
}

// newSchema returns the name of a schema of the test's own, dropped (with
// everything in it) when the test ends.
func newSchema(t testing.TB, dsn string) string {
	t.Helper()
	return pgtest.Schema(t, dsn, "pgstore_test_")
}

// openTest opens a store on a fresh schema (or the given one).
func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.DSN == "" {
		opts.DSN = testDSN(t)
	}
	if opts.Schema == "" {
		opts.Schema = newSchema(t, opts.DSN)
		opts.Migrate = true
	}
	if opts.InstanceID == "" {
		opts.InstanceID = "test-1"
	}
	if opts.Lease == 0 {
		opts.Lease = time.Hour // no heartbeat during a test unless asked
	}
	s, err := Open(bg, opts)
	if err != nil {
		t.Fatalf("Open(%s, %s) = %v", opts.Schema, opts.InstanceID, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openPair opens instances a and b of one store (a schema of their own)
// with opts.
func openPair(t *testing.T, opts Options) (a, b *Store) {
	t.Helper()
	opts.InstanceID = "a"
	a = openTest(t, opts)
	opts.Schema, opts.InstanceID = a.opts.Schema, "b"
	return a, openTest(t, opts)
}

// exec runs sql on a connection of its own.
func exec(t testing.TB, dsn, sql string, args ...any) pgconnTag {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return pgconnTag{tag.RowsAffected()}
}

type pgconnTag struct{ rows int64 }
