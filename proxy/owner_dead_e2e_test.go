package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// A retry on B of a key A has in flight is throttled while A is alive and
// slow (the SMSC has not answered it), gets ESME_RSYSERR once A stops
// renewing its lease (A lost the database: it is presumed dead before its
// lease runs out), and unknown_status once the lease has run out and the
// record is unknown. Nothing is forwarded a second time.
func TestRetryOfADeadInstancesInFlightKeyGetsSysErrThenUnknown(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	relayA, dsnA := pgtest.ThroughRelay(t, dsn)
	// The SMSC never answers: A's submit stays in flight.
	smsc := startSim(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Drop: true} }})
	const unknownStatus = smpp.Status(0x401) // told apart from the 0x08 of a dead owner
	edit := func(cfg *config.Config) {
		cfg.Store.Lease = config.Duration(2 * time.Second)
		cfg.Upstreams[0].ResponseTimeout = config.Duration(8 * time.Second) // past the test
		cfg.Accounts[0].Idempotency.InflightWait = config.Duration(200 * time.Millisecond)
		cfg.Accounts[0].Idempotency.UnknownStatus = config.Status(unknownStatus)
	}
	a := startShared(t, smsc.Addr(), dsnA, schema, "a", edit)
	t.Cleanup(relayA.Heal) // before A closes
	b := startShared(t, smsc.Addr(), dsn, schema, "b", edit)

	msg := esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "slow-1", Text: []byte("your code is 4321")}
	onA := dialClient(t, a.Addr(), smpp.BindTransmitter)
	pending := onA.SubmitAsync(t.Context(), msg)
	testkit.Eventually(t, 10*time.Second, func() bool { return smsc.Total() == 1 }, "A's submit at the SMSC")
	onB := dialClient(t, b.Addr(), smpp.BindTransmitter)
	retry := func() smpp.Status {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r, err := onB.Submit(ctx, msg)
		if err != nil {
			t.Fatalf("retry on B: %v", err)
		}
		return r.Status
	}
	if st := retry(); st != smpp.StatusThrottled {
		t.Fatalf("retry on B while A is alive and waiting for the SMSC = %v, want ESME_RTHROTTLED", st)
	}

	relayA.Cut() // A can no longer renew its lease
	var seen []smpp.Status
	testkit.Eventually(t, 15*time.Second, func() bool {
		st := retry()
		seen = append(seen, st)
		return st == smpp.StatusSysErr
	}, "ESME_RSYSERR on B once A stopped renewing its lease")
	for _, st := range seen[:len(seen)-1] {
		if st != smpp.StatusThrottled {
			t.Errorf("retry on B before A was presumed dead = %v, want ESME_RTHROTTLED", st)
		}
	}
	if n := b.engine.Count(dedup.OutOwnerDead); n == 0 {
		t.Errorf("owner_dead decisions on B = 0, want the ESME_RSYSERR counted as owner_dead")
	}
	seen = nil
	testkit.Eventually(t, 15*time.Second, func() bool {
		st := retry()
		seen = append(seen, st)
		return st == unknownStatus
	}, "unknown_status on B once A's lease ran out and its record is unknown")
	for _, st := range seen[:len(seen)-1] {
		if st != smpp.StatusSysErr {
			t.Errorf("retry on B after A was presumed dead, before its lease ran out = %v, want ESME_RSYSERR", st)
		}
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("submits at the SMSC = %d, want 1: a retry never forwards a key another instance may have sent", n)
	}
	select {
	case r := <-pending:
		t.Logf("A's submit ended with %+v", r)
	default:
	}
}
