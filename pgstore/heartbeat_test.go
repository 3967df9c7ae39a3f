package pgstore

import (
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

	conn, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := tx.Exec(bg, `SELECT 1 FROM `+a.opts.Schema+`.records WHERE key = $1 FOR UPDATE`, []byte("ghost")); err != nil {
		t.Fatal(err)
	}
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
