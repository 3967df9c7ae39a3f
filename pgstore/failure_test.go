package pgstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// viaProxy returns a relay in front of the database and dsn pointed at it.
func viaProxy(t *testing.T, dsn string) (*pgtest.Relay, string) {
	t.Helper()
	return pgtest.ThroughRelay(t, dsn)
}

// When the database goes away, operations fail promptly with
// ErrUnavailable (bounded by Options.Timeout, whatever the caller's
// context) instead of hanging; once it is back, the store recovers by
// itself.
func TestDatabaseGoneFailsPromptlyThenRecovers(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatal(err)
	}
	proxy, pdsn := viaProxy(t, dsn)
	const timeout = 2 * time.Second
	s := openTest(t, Options{DSN: pdsn, Schema: schema, Timeout: timeout})
	now := time.Now()
	mustCreate(t, s, sentRecord(now, "before", "test-1/1", 1))

	proxy.Cut()
	ops := map[string]func() error{
		"Create": func() error { _, _, err := s.Create(bg, sentRecord(now, "during", "test-1/2", 2)); return err },
		"Get":    func() error { _, err := s.Get(bg, state.Key{Account: "acme", Key: "before"}); return err },
		"Update": func() error {
			_, err := s.Update(bg, state.Key{Account: "acme", Key: "before"}, func(*state.Record) error { return nil })
			return err
		},
		"Enqueue": func() error {
			_, _, err := s.Enqueue(bg, &state.QueueEntry{Queue: "shop", Body: []byte("x"), Expires: now.Add(time.Hour)})
			return err
		},
		"Renew": func() error { return s.Renew(bg) },
	}
	for name, op := range ops {
		start := time.Now()
		err := op()
		if took := time.Since(start); err == nil || took > 2*timeout {
			t.Errorf("%s with the database gone = %v after %v; want an error within %v", name, err, took, 2*timeout)
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s with the database gone = %v; want ErrUnavailable", name, err)
		}
	}

	proxy.Heal()
	testkit.Eventually(t, 15*time.Second, func() bool {
		_, created, err := s.Create(bg, sentRecord(now, "after", "test-1/3", 3))
		return err == nil && created
	}, "Create after the database came back")
	if got := mustGet(t, s, state.Key{Account: "acme", Key: "before"}); got.Owner != "test-1/1" {
		t.Errorf("record written before the outage = %+v", got)
	}
	if err := s.Renew(bg); err != nil || !s.Lease() {
		t.Errorf("Renew after recovery = %v, Lease %v; want nil, true", err, s.Lease())
	}
}

// A database that accepts connections but never answers cannot hang an
// operation past Options.Timeout, even with a context without deadline.
func TestStalledDatabaseIsBoundedByTimeout(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatal(err)
	}
	proxy, pdsn := viaProxy(t, dsn)
	const timeout = time.Second
	s := openTest(t, Options{DSN: pdsn, Schema: schema, Timeout: timeout})
	proxy.Stall()
	start := time.Now()
	_, _, err := s.Create(context.Background(), sentRecord(time.Now(), "stalled", "test-1/1", 1))
	if took := time.Since(start); err == nil || took > 3*timeout {
		t.Errorf("Create against a stalled database = %v after %v; want an error within %v", err, took, 3*timeout)
	}
	start = time.Now()
	s.Close()
	if took := time.Since(start); took > 4*timeout {
		t.Errorf("Close against a stalled database took %v; want at most %v", took, 4*timeout)
	}
}

// Backends killed under the store (pg_terminate_backend, as a failover
// or an operator would) fail at most the operations in flight; the pool
// reconnects and the store goes on.
func TestTerminatedBackendsAreReconnected(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	s := openTest(t, Options{DSN: dsn, InstanceID: "terminated"})
	now := time.Now()
	mustCreate(t, s, sentRecord(now, "k0", "terminated/0", 0))
	killed := exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, "smppproxy terminated").rows
	if killed == 0 {
		t.Fatalf("no backend of the store to terminate")
	}
	for i := 1; i <= 3; i++ {
		key := fmt.Sprintf("k%d", i)
		testkit.Eventually(t, 15*time.Second, func() bool {
			_, _, err := s.Create(bg, sentRecord(now, key, "terminated/1", uint32(i)))
			return err == nil
		}, "Create after the backends were terminated")
		if got := mustGet(t, s, state.Key{Account: "acme", Key: key}); got.Owner != "terminated/1" {
			t.Errorf("Get(%s) = %+v", key, got)
		}
	}
}
