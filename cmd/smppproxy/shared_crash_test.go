package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// writeSharedConfig writes the configuration of instance id of a proxy
// on the shared PostgreSQL store (schema) in front of smsc, listening on
// listen; its lease is short so that a test sees it run out.
func writeSharedConfig(t *testing.T, dsn, schema, id, listen, smsc string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen:
  address: %q
  bind_timeout: 5s
admin:
  address: %q
store:
  backend: postgres
  dsn: %q
  schema: %s
  instance_id: %s
  lease: 2s
log: {level: warn}
shutdown_timeout: 5s
`, listen, freePort(t), dsn, schema, id) + routeYAML("secret", smsc, "pw", "binds: 2\nwindow: 50\nresponse_timeout: 10s")
	p := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// One of two instances sharing the store is killed (SIGKILL) under load;
// the ESME retries everything on the other. No key reaches the SMSC twice,
// every message the ESME saw acknowledged keeps its id, the survivor keeps
// serving, and the dead instance's in-flight keys become unknown once its
// lease has run out (held: on_unknown hold).
func TestKill9OfOneOfTwoInstancesNeverDuplicates(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "crash_test_")
	smsc := subprocessSMSC(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%50) * time.Millisecond}
	}})
	listenA, listenB := freePort(t), freePort(t)
	a := startServe(t, writeSharedConfig(t, dsn, schema, "a", listenA, smsc.Addr()), filepath.Join(t.TempDir(), "a.log"))
	startServe(t, writeSharedConfig(t, dsn, schema, "b", listenB, smsc.Addr()), filepath.Join(t.TempDir(), "b.log"))
	onA, onB := dialReady(t, listenA), dialReady(t, listenB)
	defer onB.Close()

	const keys = 200
	send := func(c *esme.Client, i int) (esme.Resp, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("pay-%d", i), Text: []byte(fmt.Sprintf("payment notice %d", i))})
	}
	var mu sync.Mutex
	acked := map[int]string{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 4 {
				r, err := send(onA, i)
				if err != nil {
					return // A is gone
				}
				if r.Status == 0 {
					mu.Lock()
					acked[i] = r.MessageID
					mu.Unlock()
				}
			}
		}()
	}
	waitAcked(t, &mu, acked, keys/4, "a quarter of the keys acknowledged on A before the crash")
	a.kill9(t)
	onA.Close()
	wg.Wait()

	unknown := 0
	for i := range keys {
		var r esme.Resp
		// A key A had in flight is `sent` under A's lease: B throttles it
		// (0x58) while A may still be alive, then answers 0x08, once A has
		// missed its lease renewals and, after the lease ran out, as unknown.
		testkit.Eventually(t, 20*time.Second, func() bool {
			var err error
			r, err = send(onB, i)
			return err == nil && r.Status != smpp.StatusThrottled
		}, fmt.Sprintf("a final answer on B for key %d", i))
		mu.Lock()
		want, wasAcked := acked[i]
		mu.Unlock()
		switch {
		case wasAcked && (r.Status != 0 || r.MessageID != want):
			t.Errorf("key %d was acknowledged on A with %q; on B got %v %q", i, want, r.Status, r.MessageID)
		case r.Status == smpp.StatusSysErr:
			unknown++ // in flight on A at the crash: unknown, held
		case r.Status != 0:
			t.Errorf("key %d on B: status %v", i, r.Status)
		}
	}
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	if r, err := send(onB, keys+1); err != nil || r.Status != 0 {
		t.Errorf("a fresh key on the survivor = %+v, %v; want accepted", r, err)
	}
	t.Logf("acked on A before the crash: %d of %d; unknown on B (held, not resent): %d; SMSC received %d", len(acked), keys, unknown, smsc.Total())
}
