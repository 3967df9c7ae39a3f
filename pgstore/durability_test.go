package pgstore

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The store's connections commit with synchronous_commit on whatever the
// role or the DSN asks (remote_apply, stronger, is kept): with it off, a
// write reported durable is lost if the database crashes, and its key's
// retry is forwarded again (from review: a role set to off, a common
// tuning, gave the store connections with it off).
func TestTheStoreCommitsSynchronouslyWhateverTheRoleOrDSNSays(t *testing.T) {
	dsn := testDSN(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "smppproxy_async_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(bg, `CREATE ROLE `+ident+` LOGIN SUPERUSER`); err != nil {
		t.Fatalf("creating a role: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(bg, `DROP ROLE IF EXISTS `+ident); err != nil {
			t.Errorf("dropping role %s: %v", role, err)
		}
		admin.Close(bg)
	})
	if _, err := admin.Exec(bg, `ALTER ROLE `+ident+` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("SMPPPROXY_TEST_POSTGRES is not a URL: %v", err)
	}
	u.User = url.User(role)
	for name, c := range map[string]struct{ param, want string }{
		"the role says off":         {"", "on"},
		"the DSN says off":          {"off", "on"},
		"the DSN says remote_write": {"remote_write", "on"},
		"the DSN says remote_apply": {"remote_apply", "remote_apply"},
	} {
		t.Run(name, func(t *testing.T) {
			q := u.Query()
			if c.param != "" {
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
