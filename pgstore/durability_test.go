package pgstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// The store's connections commit with synchronous_commit on whatever the
// role or the DSN asks (remote_apply, stronger, is kept, however set; and
// it is a SET after connecting, not a parameter of the connection request,
// which PgBouncer would refuse): with it off, a
// write reported durable is lost if the database crashes, and its key's
// retry is forwarded again (from review: a role set to off, a common
// tuning, gave the store connections with it off).
func TestTheStoreCommitsSynchronouslyWhateverTheRoleOrDSNSays(t *testing.T) {
	r := newTestRole(t, "smppproxy_async_")
	exec(t, r.admin, `ALTER ROLE `+r.ident+` SET synchronous_commit = off`)
	u := r.dsn
	for name, c := range map[string]struct{ param, want string }{
		"the role says off":                  {"", "on"},
		"the DSN says off":                   {"off", "on"},
		"the DSN says remote_write":          {"remote_write", "on"},
		"the DSN says remote_apply":          {"remote_apply", "remote_apply"},
		"the DSN's options say remote_apply": {"options", "remote_apply"},
	} {
		t.Run(name, func(t *testing.T) {
			q := u.Query()
			switch c.param {
			case "":
			case "options":
				q.Set("options", "--synchronous_commit=remote_apply")
			default:
				q.Set("synchronous_commit", c.param)
			}
			v := *u
			v.RawQuery = q.Encode()
			s := openTest(t, Options{DSN: v.String()})
			var got string
			if err := s.pool.QueryRow(bg, `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("synchronous_commit of the store's connections = %q, want %q", got, c.want)
			}
		})
	}
}

// A database that turns read-only (a failover in progress, or connections
// left on a demoted primary) makes the store report itself not writable
// (readiness), its operations fail fast as unavailable, and its pool's
// connections are made again, so that once the database takes writes
// again the store does too. Before, a read-only refusal was an ordinary
// error: readiness stayed green while every create failed, and the pool
// kept its connections to the read-only server (from review).
func TestAReadOnlyDatabaseMakesTheStoreUnwritableUntilItTakesWritesAgain(t *testing.T) {
	r := newTestRole(t, "smppproxy_ro_")
	s := openTest(t, Options{DSN: r.dsn.String(), Timeout: 2 * time.Second})
	now := time.Now()
	n := 0
	create := func() error {
		n++
		_, _, err := s.Create(bg, sentRecord(now, fmt.Sprint("k", n), "test-1/1", uint32(n)))
		return err
	}
	if err := create(); err != nil {
		t.Fatalf("Create on a writable database = %v", err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("Writable() on a writable database = %v", err)
	}

	exec(t, r.admin, `ALTER ROLE `+r.ident+` SET default_transaction_read_only = on`)
	exec(t, r.admin, terminateRole, r.name)
	testkit.Eventually(t, 30*time.Second, func() bool {
		err := create()
		return err != nil && errors.Is(err, ErrUnavailable) && strings.Contains(fmt.Sprint(s.Writable()), "read-only")
	}, "creates never refused as unavailable with Writable() naming the read-only database")
	// A read, which the read-only server serves (readiness makes one
	// before it asks Writable), does not make the store writable again.
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := s.Get(bg, state.Key{Account: "acme", Key: "k1"})
		return err == nil
	}, "reads never served by the read-only database")
	if err := s.Writable(); err == nil {
		t.Errorf("Writable() after a read served by the read-only database = nil, want its refusal of writes")
	}

	exec(t, r.admin, `ALTER ROLE `+r.ident+` RESET default_transaction_read_only`)
	testkit.Eventually(t, 30*time.Second, func() bool { return create() == nil && s.Writable() == nil },
		"the store never took writes again once the database did (its connections kept)")
}

// testRole is a login role of the test's own (a superuser, so that the
// store can make its schema), dropped at the end, its sessions ended.
type testRole struct {
	name, ident string
	admin       string   // the tests' DSN
	dsn         *url.URL // the tests' DSN as this role
}

// terminateRole ends the sessions of role $1.
const terminateRole = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`

func newTestRole(t *testing.T, prefix string) *testRole {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &testRole{name: prefix + hex.EncodeToString(b[:]), admin: testDSN(t)}
	r.ident = pgx.Identifier{r.name}.Sanitize()
	exec(t, r.admin, `CREATE ROLE `+r.ident+` LOGIN SUPERUSER`)
	t.Cleanup(func() {
		exec(t, r.admin, terminateRole, r.name)
		exec(t, r.admin, `DROP ROLE IF EXISTS `+r.ident)
	})
	var err error
	if r.dsn, err = url.Parse(r.admin); err != nil {
		t.Fatalf("SMPPPROXY_TEST_POSTGRES is not a URL: %v", err)
	}
	r.dsn.User = url.User(r.name)
	return r
}
