package main

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/smpp"
)

// With several targets the binds are spread over them: every target gets
// a share of the load, and the result counts all of it.
func TestRunBenchSpreadsItsBindsOverTheTargets(t *testing.T) {
	var targets []string
	var sims []*sim.Simulator
	for range 2 {
		s, err := sim.Start("127.0.0.1:0", sim.Config{SystemID: "b", Password: "p"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sims, targets = append(sims, s), append(targets, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := runBench(ctx, benchOptions{Target: targets[0], Targets: targets, SystemID: "b", Password: "p", Binds: 4, Window: 5, Count: 400, KeyTag: smpp.DefaultIdempotencyTag, KeyPrefix: "t-"})
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	if r.Answered != 400 || r.Statuses["ESME_ROK"] != 400 {
		t.Errorf("runBench = %d answered, statuses %v; want 400 ESME_ROK", r.Answered, r.Statuses)
	}
	a, b := sims[0].Total(), sims[1].Total()
	if a == 0 || b == 0 || a+b != 400 {
		t.Errorf("the targets received %d and %d submits; want both some, 400 in all", a, b)
	}
}

// --instances 2: two proxies on one PostgreSQL store take the proxied
// load together; the invariants hold over both and every child is gone
// once the bench returns.
func TestProcessBenchWithTwoInstancesHoldsItsInvariants(t *testing.T) {
	dsn := pgtest.DSN(t)
	if testing.Short() {
		t.Skip("subprocess test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := testProcOptions(t, 500, 0)
	o.Postgres, o.Instances = dsn, 2
	rep, err := runProcessBench(ctx, o)
	if err != nil {
		t.Fatalf("runProcessBench: %v", err)
	}
	assertChildrenGone(t, rep.Invariants.ChildPIDs)
	if n := len(rep.Invariants.ChildPIDs); n != 3 || rep.Instances != 2 {
		t.Errorf("%d child processes, %d instances reported; want 3 (sim and two serve), 2", n, rep.Instances)
	}
	inv := rep.Invariants
	if !inv.Hold() || inv.ProxiedAccepted != inv.ProxiedSubmits {
		t.Errorf("invariants %+v: want every proxied submit accepted, none twice at the SMSC, no changed id", inv)
	}
}
