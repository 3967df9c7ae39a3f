package pgstore

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// The lease is renewed while the maintenance waits: a take-over of dead
// instances' records that waits for a row another transaction holds (for
// up to the store's Timeout) does not hold the renewal back, so a live
// instance on a healthy database keeps its lease.
func TestTheLeaseIsRenewedWhileTheMaintenanceWaitsForARowLock(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = 600 * time.Millisecond
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease, Timeout: 10 * time.Second})
	ghost := sentRecord(time.Now(), "ghost", "gone/1", 1) // of an instance that is no more
	mustCreate(t, a, ghost)

	conn, _ := lockRows(t, dsn, `SELECT 1 FROM `+a.opts.Schema+`.records WHERE key = 'ghost' FOR UPDATE`)
	waiting := func() bool {
		var n int
		if err := a.pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE $1::int4 = ANY(pg_blocking_pids(pid))`,
			int32(conn.PgConn().PID())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	testkit.Eventually(t, 10*time.Second, waiting, "the maintenance never waited for the locked record")
	blocked := time.Now()
	testkit.Eventually(t, 10*time.Second, func() bool { return a.LeaseUntil().After(blocked.Add(lease)) },
		"no renewal while the maintenance waited for the row lock")
	if !waiting() {
		t.Fatal("the maintenance stopped waiting before the renewal was seen: the test proves nothing")
	}
	if !a.Lease() {
		t.Errorf("Lease() = false while the database answers; want the lease held")
	}
}

// signalOn closes its channel when a log line holding msg is written.
type signalOn struct {
	msg  string
	once sync.Once
	seen chan struct{}
}

func (s *signalOn) Write(b []byte) (int, error) {
	if strings.Contains(string(b), s.msg) {
		s.once.Do(func() { close(s.seen) })
	}
	return len(b), nil
}

// One renewal that hangs (the instance row locked a while) and fails is
// tried again soon enough that the lease never drops below its margin:
// with the store's timeout half the lease, as by default, a renewal that
// waited all of it used to return after the lease had entered its margin,
// and the instance answered 0x08 and reported not ready meanwhile.
func TestOneRenewalThatHangsLeavesTheLeaseHeld(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = 1200 * time.Millisecond
	failed := &signalOn{msg: "instance lease not renewed", seen: make(chan struct{})}
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease, Timeout: lease / 2,
		Logger: slog.New(slog.NewTextHandler(failed, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	_, tx := lockRows(t, dsn, `SELECT 1 FROM `+a.opts.Schema+`.instances WHERE id = 'a' FOR UPDATE`)
	locked := a.LeaseUntil()
	var lapsed atomic.Bool
	watch := func() bool {
		if !a.Lease() {
			lapsed.Store(true)
		}
		select {
		case <-failed.seen:
			return true
		default:
			return false
		}
	}
	testkit.Eventually(t, 10*time.Second, watch, "no renewal failed while the instance row was locked")
	_ = tx.Rollback(bg)
	testkit.Eventually(t, 10*time.Second, func() bool {
		if !a.Lease() {
			lapsed.Store(true)
		}
		return a.LeaseUntil().After(locked)
	}, "no renewal after the instance row was unlocked")
	if lapsed.Load() {
		t.Errorf("the lease dropped below its margin around one renewal that hung")
	}
}

// lockRows runs sql (a SELECT … FOR UPDATE) in a transaction of a
// connection of its own, which holds the rows it locked until the test
// rolls it back or ends.
func lockRows(t *testing.T, dsn, sql string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	conn, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(bg) })
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(bg) })
	if _, err := tx.Exec(bg, sql); err != nil {
		t.Fatal(err)
	}
	return conn, tx
}
