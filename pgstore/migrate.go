package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema's versions: NNNN_name.sql, applied in order.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("pgstore: migration file %s: want NNNN_name.sql", base)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migrations: version %d missing", i+1)
		}
	}
	return out, nil
}

// defaultConnectTimeout bounds connecting for Migrate and ReadStatus when
// the DSN sets no connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// SchemaVersion is the schema version this build uses.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate brings schema in the database at dsn up to SchemaVersion,
// creating the schema if needed: each missing migration runs in a
// transaction of its own and is recorded in schema_migrations, all under
// a session advisory lock, so concurrent Migrates (several instances
// starting) apply each migration once. Running it again is a no-op. It is
// what `smppproxy store migrate` runs.
func Migrate(ctx context.Context, dsn, schema string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("pgstore: schema name %q: want lower-case letters, digits and _", schema)
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("pgstore: DSN: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: migrate: %w", ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lock := "smppproxy migrate " + schema
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, lock); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, lock)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE IF NOT EXISTS `+q+`.schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	cur, err := readVersion(ctx, conn, schema)
	if err != nil {
		return err
	}
	if cur > len(ms) {
		return fmt.Errorf("%w: schema %q is at version %d, newer than this build's %d", ErrSchemaVersion, schema, cur, len(ms))
	}
	for _, m := range ms[cur:] {
		if err := apply(ctx, conn, schema, m); err != nil {
			return err
		}
	}
	return nil
}

// A migration's statements wait at most migrationLockTimeout for a lock
// (lock_timeout): while a statement waits for a table's exclusive lock
// (DROP INDEX, CREATE INDEX), every other statement on that table, every
// instance's, queues behind it. A migration that times out is run again
// after a pause that doubles from a second, migrationAttempts times in all
// (about a minute), then fails, to be run again later (from review: 0004
// waited without limit, 0005 for 10 s, behind a long read such as the
// records count, while every instance's writes to the table stalled).
const (
	migrationLockTimeout = 500 * time.Millisecond
	migrationAttempts    = 8
)

func apply(ctx context.Context, conn *pgx.Conn, schema string, m migration) error {
	pause := time.Second
	for attempt := 1; ; attempt++ {
		err := applyOnce(ctx, conn, schema, m)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return err
		}
		if attempt == migrationAttempts {
			return fmt.Errorf("%w (its locks waited %v each, %d times, for other transactions on the table: a long read, such as `store status` or the records count; run it again)",
				err, migrationLockTimeout, attempt)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, 10*time.Second)
	}
}

func applyOnce(ctx context.Context, conn *pgx.Conn, schema string, m migration) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true), set_config('lock_timeout', $2, true)`,
			pgx.Identifier{schema}.Sanitize(), fmt.Sprint(migrationLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// The simple protocol runs a file of several statements.
		if _, err := tx.Exec(ctx, m.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: migration %s of schema %q: %w", m.name, schema, err)
	}
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readVersion returns the schema's version: 0 when it has no
// schema_migrations table.
func readVersion(ctx context.Context, q querier, schema string) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&v)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") { // undefined table, schema
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: reading the schema version: %w", err)
	}
	return v, nil
}

// checkVersion fails unless the schema is at this build's version.
func checkVersion(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	v, err := readVersion(ctx, pool, schema)
	if err != nil {
		return err
	}
	switch want := SchemaVersion(); {
	case v < want:
		return fmt.Errorf("%w: schema %q is at version %d, this build needs %d: run `smppproxy store migrate` (or open with migration enabled)",
			ErrSchemaVersion, schema, v, want)
	case v > want:
		return fmt.Errorf("%w: schema %q is at version %d, newer than this build's %d: upgrade smppproxy", ErrSchemaVersion, schema, v, want)
	}
	return nil
}
