package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// Migrating twice changes nothing, the version is reported, and
// concurrent migrations of one schema apply each version once.
func TestMigrateIsIdempotentAndReportsTheVersion(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Migrate(bg, dsn, schema); err != nil {
				t.Errorf("concurrent Migrate = %v", err)
			}
		}()
	}
	wg.Wait()
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatalf("Migrate again = %v", err)
	}
	st, err := ReadStatus(bg, dsn, schema)
	if err != nil || st.Version != SchemaVersion() || st.Want != SchemaVersion() || SchemaVersion() < 1 {
		t.Fatalf("ReadStatus = %+v, %v; want version %d", st, err, SchemaVersion())
	}
	n := exec(t, dsn, `SELECT 1 FROM `+schema+`.schema_migrations`).rows
	if n != int64(SchemaVersion()) {
		t.Errorf("schema_migrations has %d rows after 4 Migrates; want %d (one per version)", n, SchemaVersion())
	}
}

// Without Migrate, Open refuses a schema that is behind (or ahead of)
// this build, naming the command that brings it up to date.
func TestOpenRefusesASchemaNotAtThisVersion(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	_, err := Open(bg, Options{DSN: dsn, Schema: schema, InstanceID: "a"})
	if !errors.Is(err, ErrSchemaVersion) || !strings.Contains(err.Error(), "smppproxy store migrate") {
		t.Fatalf("Open of an empty schema without Migrate = %v; want ErrSchemaVersion naming `smppproxy store migrate`", err)
	}
	if err := Migrate(bg, dsn, schema); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, `DELETE FROM `+schema+`.schema_migrations WHERE version = $1`, SchemaVersion())
	if _, err := Open(bg, Options{DSN: dsn, Schema: schema, InstanceID: "a"}); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Open of a schema one version behind = %v; want ErrSchemaVersion", err)
	}
	exec(t, dsn, `INSERT INTO `+schema+`.schema_migrations (version, name) VALUES ($1, 'x'), ($2, 'future')`, SchemaVersion(), SchemaVersion()+1)
	if _, err := Open(bg, Options{DSN: dsn, Schema: schema, InstanceID: "a"}); !errors.Is(err, ErrSchemaVersion) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a schema ahead of the build = %v; want ErrSchemaVersion (newer)", err)
	}
	exec(t, dsn, `DELETE FROM `+schema+`.schema_migrations WHERE version = $1`, SchemaVersion()+1)
	s := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a"})
	if st, err := s.Status(bg); err != nil || st.Version != SchemaVersion() {
		t.Errorf("Status = %+v, %v; want version %d", st, err, SchemaVersion())
	}
}

// Instances see each other's leases; once an instance stops renewing its
// lease (its clock moved on without a renewal), another takes its sent
// records over as unknown, and leaves alone the records of live instances
// and those not sent.
func TestDeadInstanceSentRecordsBecomeUnknown(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	c := storetest.NewClock(t0)
	const lease = time.Hour // the heartbeat never fires during the test
	opened := time.Now()
	a, b := openPair(t, Options{DSN: dsn, Now: c.Now, Lease: lease})
	st, err := b.Status(bg)
	if err != nil || len(st.Instances) != 2 || !st.Instances[0].Live || st.Instances[0].ID != "a" || st.Instances[0].LeaseUntil.Before(opened.Add(lease-time.Minute)) {
		t.Fatalf("b.Status = %+v, %v; want a and b, a live for about %v from %v (the database's clock)", st.Instances, err, lease, opened)
	}
	day := func(r *state.Record) *state.Record { r.Expires = c.Now().Add(24 * time.Hour); return r }
	mustCreate(t, a, day(sentRecord(c.Now(), "a-sent", "a/1", 1)))
	acc := day(sentRecord(c.Now(), "a-accepted", "a/2", 2))
	acc.State = state.Accepted
	mustCreate(t, a, acc)
	mustCreate(t, b, day(sentRecord(c.Now(), "b-sent", "b/1", 3)))

	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 0 {
		t.Fatalf("ExpireDeadOwners with every instance live = %d, %v; want 0", n, err)
	}
	c.Advance(lease + time.Second) // a stops renewing: it is dead to itself, and to b
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", -time.Second)
	if err := b.Renew(bg); err != nil {
		t.Fatal(err)
	}
	if a.Lease() || !b.Lease() {
		t.Errorf("Lease() after a missed its renewal: a %v, b %v; want false, true", a.Lease(), b.Lease())
	}
	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 1 {
		t.Fatalf("ExpireDeadOwners = %d, %v; want 1 (a's sent record)", n, err)
	}
	got := mustGet(t, b, state.Key{Account: "acme", Key: "a-sent"})
	if got.State != state.Unknown || len(got.History) != 2 || got.History[1].State != state.Unknown {
		t.Errorf("a's sent record = %s with history %+v; want unknown with an event saying why", got.State, got.History)
	}
	if r, err := b.UnknownByAddr(bg, "smsc", got.AddrHash); err != nil || len(r) != 1 {
		t.Errorf("UnknownByAddr of the taken-over record = %v, %v; want it", r, err)
	}
	for key, want := range map[string]state.SubmitState{"a-accepted": state.Accepted, "b-sent": state.Sent} {
		if got := mustGet(t, b, state.Key{Account: "acme", Key: key}); got.State != want {
			t.Errorf("%s = %s after ExpireDeadOwners; want it untouched (%s)", key, got.State, want)
		}
	}
	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 0 {
		t.Errorf("ExpireDeadOwners again = %d, %v; want 0", n, err)
	}
}

// An instance id whose lease another process holds is refused, unless
// taken over by force (the previous run loses its lease); once a run
// closed (giving the lease up), a new run of the instance opens and takes
// over the sent records the previous run left.
func TestInstanceIDInUseIsRefusedUntilReleased(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	c := storetest.NewClock(t0)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Now: c.Now})
	mustCreate(t, a, sentRecord(c.Now(), "left", "a/1", 1))
	if s, err := Open(bg, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "a", Now: c.Now}); !errors.Is(err, ErrInstanceInUse) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("second Open of instance a = %v; want ErrInstanceInUse", err)
	}
	mustCreate(t, a, sentRecord(c.Now(), "left-too", "a/2", 2))
	forced := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "a", Now: c.Now, TakeOver: true})
	if got := mustGet(t, forced, state.Key{Account: "acme", Key: "left-too"}); got.State != state.Unknown || !forced.Lease() {
		t.Errorf("after a forced take-over: record of the previous run %s, lease %v; want unknown, true", got.State, forced.Lease())
	}
	if err := a.Renew(bg); !errors.Is(err, ErrInstanceInUse) || a.Lease() {
		t.Errorf("Renew by the run taken over = %v (lease %v); want ErrInstanceInUse, no lease", err, a.Lease())
	}
	forced.Close()
	a.Close()
	again := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "a", Now: c.Now})
	if !again.Lease() {
		t.Errorf("reopened instance holds no lease")
	}
	if got := mustGet(t, again, state.Key{Account: "acme", Key: "left"}); got.State != state.Unknown {
		t.Errorf("record the previous run left sent = %s; want unknown", got.State)
	}
}

// The heartbeat renews the lease on its own every Lease/3.
func TestHeartbeatRenewsTheLease(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Lease: 300 * time.Millisecond})
	first := s.LeaseUntil()
	testkit.Eventually(t, 10*time.Second, func() bool { return !s.LeaseUntil().Equal(first) },
		"lease not renewed; want renewals every 100ms")
	if !s.Lease() {
		t.Errorf("Lease() = false after a renewal")
	}
}

// The maintenance sweep deletes expired records, queue entries and dedup
// markers, and nothing live.
func TestCollectDeletesOnlyExpiredRows(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	short := sentRecord(c.Now(), "short", "test-1/1", 1)
	short.Expires = c.Now().Add(time.Minute)
	mustCreate(t, s, short)
	mustCreate(t, s, sentRecord(c.Now(), "long", "test-1/2", 2))
	for i, exp := range []time.Duration{time.Minute, 2 * time.Hour} {
		e := &state.QueueEntry{Queue: "shop", DedupKey: fmt.Sprint(i), Body: []byte("b"), Enqueued: c.Now(), Expires: c.Now().Add(exp)}
		if _, _, err := s.Enqueue(bg, e); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Minute)
	if err := s.collect(bg); err != nil {
		t.Fatalf("collect = %v", err)
	}
	count := func(table string) int64 {
		return exec(t, s.opts.DSN, `SELECT 1 FROM `+s.opts.Schema+`.`+table).rows
	}
	for table, want := range map[string]int64{"records": 1, "queue_entries": 1, "queue_markers": 1} {
		if got := count(table); got != want {
			t.Errorf("%s holds %d rows after the sweep; want %d (the live one)", table, got, want)
		}
	}
	mustGet(t, s, state.Key{Account: "acme", Key: "long"})
}

// Leases are compared on the database's clock: an instance whose clock is
// far ahead (by more than the lease) neither takes a live instance for
// dead nor turns its sent records into unknown, at its start or later.
func TestAnInstanceWhoseClockIsAheadLeavesLiveInstancesAlone(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = time.Hour // the heartbeat never fires during the test
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease})
	rec := sentRecord(time.Now(), "in-flight", "a/1", 1)
	rec.Expires = time.Now().Add(24 * time.Hour)
	mustCreate(t, a, rec)
	ahead := func() time.Time { return time.Now().Add(lease + time.Minute) }
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b", Lease: lease, Now: ahead})
	if got := mustGet(t, a, rec.Key); got.State != state.Sent {
		t.Errorf("a's in-flight record after b started = %s; want sent", got.State)
	}
	if live, err := b.InstanceLive(bg, "a"); err != nil || !live {
		t.Errorf("InstanceLive(a) from b = %v, %v; want alive", live, err)
	}
	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 0 {
		t.Errorf("ExpireDeadOwners from b = %d, %v; want 0 (a holds its lease)", n, err)
	}
	if st, err := b.Status(bg); err != nil || len(st.Instances) != 2 || !st.Instances[0].Live {
		t.Errorf("Status from b = %+v, %v; want a live", st.Instances, err)
	}
	if !b.Lease() {
		t.Errorf("b.Lease() = false; want its own lease held on its own clock")
	}
}

// An instance whose clock is ahead of the database's by more than a minute
// deletes no expired row: its sweep, which deletes every instance's rows
// expired on its clock, would delete live records of all of them (from
// review). Once its clock agrees, it sweeps again.
func TestAnInstanceWhoseClockIsAheadDeletesNoRowOfTheSharedStore(t *testing.T) {
	t.Parallel()
	ahead := 2 * time.Hour
	var skew atomic.Int64
	skew.Store(int64(ahead))
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s := openTest(t, Options{Now: clock})
	live := sentRecord(time.Now(), "live", "test-1/1", 1)
	live.Expires = time.Now().Add(time.Hour) // live on the database's clock
	mustCreate(t, s, live)
	dead := sentRecord(time.Now(), "dead", "test-1/1", 2)
	dead.Expires = time.Now().Add(-time.Minute) // expired on every clock
	mustCreate(t, s, dead)
	if err := s.collect(bg); !errors.Is(err, ErrClockAhead) {
		t.Errorf("collect on a clock %v ahead = %v, want ErrClockAhead", ahead, err)
	}
	rows := func() int64 { return exec(t, s.opts.DSN, `SELECT 1 FROM `+s.opts.Schema+`.records`).rows }
	if n := rows(); n != 2 {
		t.Errorf("records after the sweep of an instance whose clock is ahead = %d, want both (it deletes nothing)", n)
	}
	skew.Store(0)
	if err := s.collect(bg); err != nil {
		t.Fatalf("collect on a clock that agrees = %v", err)
	}
	if n := rows(); n != 1 {
		t.Errorf("records after the sweep on a clock that agrees = %d, want the live one only", n)
	}
	mustGet(t, s, state.Key{Account: "acme", Key: "live"})
}
