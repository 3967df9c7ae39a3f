package proxy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// twoInstances starts two proxies, a and b, sharing one PostgreSQL store
// (a schema of the test's own), in front of one simulator.
func twoInstances(t *testing.T, simCfg sim.Config) (*sim.Simulator, *App, *App) {
	t.Helper()
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	smsc := startSim(t, simCfg)
	start := func(id string) *App {
		cfg := testConfig(t, smsc.Addr(), t.TempDir())
		cfg.Store.Backend, cfg.Store.DSN, cfg.Store.Schema, cfg.Store.InstanceID = config.BackendPostgres, dsn, schema, id
		cfg.Accounts[0].Idempotency.InflightWait = config.Duration(5 * time.Second)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return startProxy(t, cfg)
	}
	return smsc, start("a"), start("b")
}

func TestRetryOnTheOtherInstanceIsReplayed(t *testing.T) {
	smsc, a, b := twoInstances(t, sim.Config{})
	onA := dialBound(t, a.Addr(), smpp.CmdBindTransceiver)
	onB := dialBound(t, b.Addr(), smpp.CmdBindTransceiver)
	first := onA.submit(2, keyed("x-1", "your code is 1234"))
	if first.Status != smpp.StatusOK || first.ID == "" {
		t.Fatalf("submit on A = %+v, want accepted", first)
	}
	again := onB.submit(2, keyed("x-1", "your code is 1234"))
	if again.Status != smpp.StatusOK || again.ID != first.ID {
		t.Errorf("retry on B = %+v, want the id A was given (%q)", again, first.ID)
	}
	conflict := onB.submit(3, keyed("x-1", "your code is 9999"))
	if conflict.Status != smpp.Status(config.AccountDefaults().Idempotency.ConflictStatus) {
		t.Errorf("the key with other content on B = %v, want the conflict status", conflict.Status)
	}
	wantSMSCTotal(t, smsc, 1)
}

func TestConcurrentDuplicatesSplitOverTwoInstancesReachTheSMSCOnce(t *testing.T) {
	// The SMSC answers slowly, so the duplicates meet while the first is
	// in flight.
	smsc, a, b := twoInstances(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Delay: 50 * time.Millisecond} }})
	clients := []*esme.Client{}
	for _, app := range []*App{a, b, a, b} {
		c, err := esme.Dial(t.Context(), app.Addr(), esme.Options{SystemID: "shop", Password: "secret", Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clients = append(clients, c)
	}
	const keys = 20
	ids := make([][]string, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range keys {
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("split-%d", k), Text: []byte(fmt.Sprintf("hello %d", k))})
				if err != nil {
					t.Errorf("submit split-%d: %v", k, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if r.Status == smpp.StatusOK {
					ids[k] = append(ids[k], r.MessageID)
				} else if r.Status != smpp.StatusThrottled {
					t.Errorf("submit split-%d = %v, want accepted (or throttled while in flight)", k, r.Status)
				}
			}()
		}
	}
	wg.Wait()
	for k, got := range ids {
		for _, id := range got {
			if id != got[0] {
				t.Errorf("key split-%d was answered with ids %v: one message, one id", k, got)
				break
			}
		}
	}
	for k, n := range smsc.Counts() {
		if n != 1 {
			t.Errorf("key %s reached the SMSC %d times, want once", k, n)
		}
	}
	wantSMSCTotal(t, smsc, keys)
}

// Receipts of messages submitted through A reach the ESME whichever
// instance's upstream bind they arrive on and whichever instance its
// receivers are bound to, each once: an instance claims a queued receipt
// before delivering it.
func TestReceiptsCrossInstancesAndAreDeliveredOnce(t *testing.T) {
	_, a, b := twoInstances(t, sim.Config{DLRDelay: 20 * time.Millisecond})
	rxA, err := esme.Dial(t.Context(), a.Addr(), esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindReceiver})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rxA.Close)
	rxB, err := esme.Dial(t.Context(), b.Addr(), esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindReceiver})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rxB.Close)
	tx, err := esme.Dial(t.Context(), a.Addr(), esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindTransmitter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close)
	const n = 30
	ids := submitForReceipts(t, tx, "x-dlr", n)
	got := map[string]int{}
	byInstance := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case d := <-rxA.Receipts():
			got[textID(d)]++
			byInstance["a"]++
		case d := <-rxB.Receipts():
			got[textID(d)]++
			byInstance["b"]++
		case <-deadline:
			t.Fatalf("%d of %d receipts delivered within 20s", len(got), n)
		}
	}
	// Every receipt delivered; none twice by the time both queues are empty.
	for _, app := range []*App{a, b} {
		testkit.Eventually(t, 10*time.Second, func() bool { return len(queued(t, app.Store(), "shop")) == 0 }, "the receipt queue empty")
	}
	drain := func(c *esme.Client, who string) {
		for {
			select {
			case d := <-c.Receipts():
				got[textID(d)]++
				byInstance[who]++
			default:
				return
			}
		}
	}
	drain(rxA, "a")
	drain(rxB, "b")
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("receipt of %s delivered %d times, want once", id, got[id])
		}
	}
	t.Logf("receipts delivered by instance: %v", byInstance)
}

// The shared database goes away: submits are refused with ESME_RSYSERR and
// nothing reaches the SMSC, the instance reports not ready once its lease
// has run out, and when the database is back it serves again by itself.
func TestDatabaseGoneRefusesSubmitsAndForwardsNothingThenRecovers(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	relay, rdsn := pgtest.ThroughRelay(t, dsn)
	smsc := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.Store.Backend, cfg.Store.DSN, cfg.Store.Schema, cfg.Store.InstanceID = config.BackendPostgres, rdsn, schema, "solo"
	cfg.Store.Lease = config.Duration(2 * time.Second)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if r := c.submit(2, keyed("db-1", "before")); r.Status != smpp.StatusOK {
		t.Fatalf("submit with the database up = %v, want 0", r.Status)
	}

	relay.Cut()
	for i := range 5 {
		if r := c.submit(uint32(3+i), keyed(fmt.Sprintf("db-down-%d", i), "during")); r.Status != smpp.StatusSysErr {
			t.Errorf("submit with the database gone = %v, want ESME_RSYSERR", r.Status)
		}
	}
	wantSMSCTotal(t, smsc, 1)
	testkit.Eventually(t, 15*time.Second, func() bool { return app.Ready() != nil }, "not ready once the lease ran out")

	relay.Heal()
	testkit.Eventually(t, 30*time.Second, func() bool { return app.Ready() == nil }, "ready again once the database is back")
	if r := c.submit(20, keyed("db-down-0", "during")); r.Status != smpp.StatusOK {
		t.Errorf("retry of a submit refused while the database was gone = %v, want 0 (it was never sent)", r.Status)
	}
	wantSMSCTotal(t, smsc, 2)
}
