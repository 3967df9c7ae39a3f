package pgstore

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
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
	waiting := func() bool { return blockedBy(t, a, conn) > 0 }
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

// One renewal that hangs (the instance row locked a while) does not
// hold the next back: another starts beside it, so once the database
// answers again the lease is renewed before it enters its margin. With
// the store's timeout half the lease, as by default, a renewal that waited
// all of it used to return after the lease had entered its margin, and the
// instance answered 0x08 and reported not ready meanwhile.
func TestOneRenewalThatHangsLeavesTheLeaseHeld(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = 1200 * time.Millisecond
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease, Timeout: lease / 2})
	conn, tx := lockRows(t, dsn, `SELECT 1 FROM `+a.opts.Schema+`.instances WHERE id = 'a' FOR UPDATE`)
	locked := a.LeaseUntil()
	var lapsed atomic.Bool
	watch := func(done func() bool) func() bool {
		return func() bool {
			if !a.Lease() {
				lapsed.Store(true)
			}
			return done()
		}
	}
	testkit.Eventually(t, 10*time.Second, watch(func() bool { return a.renewing.Load() >= 2 && blockedBy(t, a, conn) >= 1 }),
		"no second renewal beside the one that hangs")
	_ = tx.Rollback(bg)
	testkit.Eventually(t, 10*time.Second, watch(func() bool { return a.LeaseUntil().After(locked) }),
		"no renewal once the instance row was unlocked")
	if lapsed.Load() {
		t.Errorf("the lease dropped below its margin around one renewal that hung")
	}
}

// Renewals that are slow but answered (each a little over a sixth of the
// lease, well under the store's timeout) keep the lease held, and the
// store answers meanwhile.
func TestSlowButAnsweredRenewalsKeepTheLease(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = 1200 * time.Millisecond
	failed := &signalOn{msg: "instance lease not renewed", seen: make(chan struct{})}
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease, Timeout: lease / 2,
		Logger: slog.New(slog.NewTextHandler(failed, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	sch := a.opts.Schema
	exec(t, dsn, `CREATE FUNCTION `+sch+`.slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.25); RETURN NEW; END $$`)
	exec(t, dsn, `CREATE TRIGGER slow BEFORE UPDATE ON `+sch+`.instances FOR EACH ROW EXECUTE FUNCTION `+sch+`.slow()`)
	var lapsed atomic.Bool
	unavailable, renewals, last := 0, 0, a.LeaseUntil()
	testkit.Eventually(t, 20*time.Second, func() bool {
		if !a.Lease() {
			lapsed.Store(true)
		}
		if _, err := a.Get(bg, state.Key{Account: "x", Key: "none"}); errors.Is(err, ErrUnavailable) {
			unavailable++
		}
		if u := a.LeaseUntil(); u.After(last) {
			renewals, last = renewals+1, u
		}
		return renewals >= 3
	}, "three renewals under the slow trigger")
	select {
	case <-failed.seen:
		t.Errorf("a renewal failed though each was answered within the store's timeout")
	default:
	}
	if lapsed.Load() || unavailable > 0 {
		t.Errorf("lease lapsed %v, reads refused as unavailable %d; want the lease held and the store answering", lapsed.Load(), unavailable)
	}
}

// blockedBy is how many of the store's connections wait for a lock that
// conn's transaction holds.
func blockedBy(t *testing.T, s *Store, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE $1::int4 = ANY(pg_blocking_pids(pid))`,
		int32(conn.PgConn().PID())).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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

// Once a renewal found the instance taken over by another process, a
// renewal sent before that and answered after it does not give the lease
// back: the instance stays without a lease.
func TestALateRenewalDoesNotGiveBackALeaseTakenOver(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: time.Hour})
	openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "a", Lease: time.Hour, TakeOver: true})
	if err := a.Renew(bg); !errors.Is(err, ErrInstanceInUse) {
		t.Fatalf("Renew after the take-over = %v; want ErrInstanceInUse", err)
	}
	a.setLeaseUntil(time.Now().Add(time.Hour)) // the earlier renewal's answer, late
	if a.Lease() {
		t.Errorf("Lease() = true after the instance was taken over; want it lost for good")
	}
}
