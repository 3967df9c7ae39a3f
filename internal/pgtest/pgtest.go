// Package pgtest finds the PostgreSQL database of the tests and gives each
// test a schema of its own. Tests read the DSN from SMPPPROXY_TEST_POSTGRES;
// without it they skip, naming the variable, unless
// SMPPPROXY_REQUIRE_POSTGRES=1 (as in CI), which makes them fail instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables the tests read.
const (
	EnvDSN     = "SMPPPROXY_TEST_POSTGRES"
	EnvRequire = "SMPPPROXY_REQUIRE_POSTGRES"
)

// DSN returns the tests' database, or skips (fails, when required) t.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set and %s=1: the PostgreSQL tests need a database", EnvDSN, EnvRequire)
		}
		t.Skipf("set %s to a PostgreSQL DSN to run the PostgreSQL tests", EnvDSN)
	}
	return dsn
}

// Schema returns the name of a schema of the test's own (prefix plus a
// random suffix), dropped with everything in it when the test ends.
func Schema(t testing.TB, dsn, prefix string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// SetLeaseLeft makes what is left of instance id's lease in schema left
// (negative: run out that long ago), on the database's clock, which is
// the one the instances compare leases with: as if the instance had last
// renewed it that long before (the instance's own view, Lease, is its
// own and does not change).
func SetLeaseLeft(t testing.TB, dsn, schema, id string, left time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "instances"}.Sanitize()+`
		SET lease_until = now() + $2::int8 * interval '1 microsecond' WHERE id = $1`, id, left.Microseconds())
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("setting the lease of instance %s: %v (%d rows)", id, err, tag.RowsAffected())
	}
}
