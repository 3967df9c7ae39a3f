package pgstore

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// An instance is presumed alive while its lease has at least half of it
// left (it renews every third), dead once it has missed a renewal and a
// margin, and dead at once when it gave its lease up or never had one;
// an instance is always alive to itself.
func TestInstanceLiveFollowsTheLeaseHeartbeat(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	c := storetest.NewClock(t0)
	const lease = time.Hour // the heartbeat never fires during the test
	a, b := openPair(t, Options{DSN: dsn, Now: c.Now, Lease: lease})
	live := func(who string) bool {
		t.Helper()
		ok, err := b.InstanceLive(bg, who)
		if err != nil {
			t.Fatalf("InstanceLive(%s) = %v", who, err)
		}
		return ok
	}
	if !live("a") || !live("b") {
		t.Fatalf("InstanceLive right after a renewal: a %v, b (itself) %v; want both alive", live("a"), live("b"))
	}
	if live("nobody") {
		t.Errorf("InstanceLive of an instance that never registered = true; want dead")
	}
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", lease-lease/3-time.Minute) // one renewal late: a slow renewal, not yet a dead owner
	if !live("a") {
		t.Errorf("InstanceLive(a) one renewal late (%v without one) = false; want alive until half the lease is gone", lease/3+time.Minute)
	}
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", lease/2-time.Minute) // a has not renewed for over half its lease
	if live("a") {
		t.Errorf("InstanceLive(a) with half its lease gone unrenewed = true; want presumed dead")
	}
	if !live("b") {
		t.Errorf("InstanceLive of the instance itself = false; want alive")
	}
	if err := a.Renew(bg); err != nil {
		t.Fatal(err)
	}
	if !live("a") {
		t.Errorf("InstanceLive(a) after it renewed again = false; want alive")
	}
	a.Close() // gives its lease up
	if live("a") {
		t.Errorf("InstanceLive(a) after it closed (lease given up) = true; want dead")
	}
}
