package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A connection attempt the server refuses (here: no such database; also
// too many clients, authentication) is a connection failure, whatever
// error the server sent with it: no statement ran, so the store answers
// unavailable and backs off instead of splitting a batch into one
// connection attempt per request. So are a dropped database and an idle
// session ended by the server; an error of a statement is not.
func TestRefusedConnectionsAreConnectionFailures(t *testing.T) {
	cfg, err := pgconn.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "smppproxy_no_such_database"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		c.Close(ctx)
		t.Fatal("connected to a database that does not exist")
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("connect error %v carries no server error; the test needs one", err)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{err, true},
		{fmt.Errorf("pgstore: %w", err), true},
		{&pgconn.PgError{Code: "57P04"}, true},
		{&pgconn.PgError{Code: "57P05"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "3D000"}, false}, // the same code from a statement
	} {
		if got := isConnError(tc.err); got != tc.want {
			t.Errorf("isConnError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if rejected(err) {
		t.Errorf("rejected(%v) = true: a refused connection would split a batch into one connection attempt per request", err)
	}
}
