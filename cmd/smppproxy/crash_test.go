package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// kill -9 of `smppproxy serve` in the middle of a windowed load with
// retries; after the restart the client retries everything. No key may
// reach the SMSC twice (on_unknown: hold) and every message the ESME saw
// acknowledged keeps its message_id.
func TestKill9DuringLoadNeverDuplicates(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%5) * time.Millisecond}
	}})
	dir := t.TempDir()
	listen := freePort(t)
	cfgPath := writeConfig(t, dir, listen, smsc.Addr())
	logPath := filepath.Join(dir, "proxy.log")
	p := startServe(t, cfgPath, logPath)

	const keys = 400
	var mu sync.Mutex
	acked := map[int]string{} // key index → message id the ESME saw
	text := func(i int) []byte { return []byte(fmt.Sprintf("payment notice %d", i)) }
	send := func(c *esme.Client, i int) (esme.Resp, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("pay-%d", i), Text: text(i)})
	}

	// Load: 4 clients, windowed, each retrying its keys until the crash.
	c := dialReady(t, listen)
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 4 {
				r, err := send(c, i)
				if err == nil && r.Status == 0 {
					mu.Lock()
					acked[i] = r.MessageID
					mu.Unlock()
					// A duplicate retry on the same session, like a double click.
					if i%7 == 0 {
						_, _ = send(c, i)
					}
				}
				select {
				case <-killed:
					return
				default:
				}
			}
		}()
	}
	waitAcked(t, &mu, acked, keys/3, "a third of the keys acknowledged before the crash")
	p.kill9(t)
	close(killed)
	wg.Wait()
	c.Close()
	mu.Lock()
	ackedAtCrash := len(acked)
	mu.Unlock()

	// Restart on the same data dir and retry every key.
	startServe(t, cfgPath, logPath)
	c2 := dialReady(t, listen)
	defer c2.Close()
	unknown := 0
	for i := range keys {
		var r esme.Resp
		var err error
		for try := 0; try < 50; try++ {
			r, err = send(c2, i)
			if err == nil && r.Status != smpp.StatusThrottled {
				break
			}
			time.Sleep(20 * time.Millisecond) // paces the ESME's retry while the restarted proxy throttles
		}
		if err != nil {
			t.Fatalf("retry of key %d after restart: %v", i, err)
		}
		mu.Lock()
		want, wasAcked := acked[i]
		mu.Unlock()
		switch {
		case wasAcked && (r.Status != 0 || r.MessageID != want):
			t.Errorf("key %d was acknowledged with %q before the crash; after restart got status %v id %q", i, want, r.Status, r.MessageID)
		case r.Status == smpp.StatusSysErr:
			unknown++ // in flight at the crash: unknown, held
		case r.Status != 0:
			t.Errorf("key %d after restart: status %v", i, r.Status)
		}
	}
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	t.Logf("acked before the crash: %d of %d; unknown after restart (held, not resent): %d; SMSC received %d", ackedAtCrash, keys, unknown, smsc.Total())
	if smsc.Total() > keys {
		t.Errorf("SMSC received %d submits for %d keys", smsc.Total(), keys)
	}
}

// `smppproxy serve` is killed (SIGKILL) with receipts
// queued for an ESME that is not bound, and more receipts arrive while it
// is down (the SMSC keeps resending them); after the restart the ESME binds
// and gets every one of them.
func TestKill9WithQueuedReceiptsLosesNone(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	dir := t.TempDir()
	listen := freePort(t)
	cfgPath := writeConfig(t, dir, listen, smsc.Addr())
	logPath := filepath.Join(dir, "proxy.log")
	p := startServe(t, cfgPath, logPath)

	tx := dialBind(t, listen, smpp.BindTransmitter)
	const n = 30
	var ids []string
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := tx.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("crash-dlr-%d", i), Text: []byte("parcel on its way"), RegisteredDelivery: 1})
		cancel()
		if err != nil || r.Status != 0 {
			t.Fatalf("submit %d = %+v, %v", i, r, err)
		}
		ids = append(ids, r.MessageID)
	}
	tx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const before = 20 // acknowledged by the proxy, hence queued, before the kill
	for _, id := range ids[:before] {
		if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
			t.Fatalf("receipt %s before the kill: %v, %v", id, st, err)
		}
	}
	p.kill9(t)

	// The rest is produced while the proxy is down (the SMSC no longer
	// sees its bind): the SMSC resends them until the proxy is back.
	testkit.Eventually(t, 10*time.Second, func() bool { return smsc.Sessions() == 0 },
		"the SMSC still sees the killed proxy's bind")
	var wg, sending sync.WaitGroup
	for _, id := range ids[before:] {
		wg.Add(1)
		sending.Add(1)
		go func() {
			defer wg.Done()
			sending.Done()
			if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
				t.Errorf("receipt %s across the restart: %v, %v", id, st, err)
			}
		}()
	}
	sending.Wait()
	startServe(t, cfgPath, logPath)
	wg.Wait()

	rx := dialBind(t, listen, smpp.BindReceiver)
	defer rx.Close()
	var got []string
	timeout := time.After(15 * time.Second)
	for len(got) < n {
		select {
		case d := <-rx.Receipts():
			got = append(got, d.ReceiptedID)
		case <-timeout:
			t.Fatalf("after the restart the ESME got %d of %d receipts: %v", len(got), n, got)
		}
	}
	if !slices.Equal(got[:before], ids[:before]) {
		t.Errorf("receipts queued before the kill arrived as %v, want in order %v", got[:before], ids[:before])
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Errorf("after the restart the ESME got %v, want each of %v once", got, want)
	}
	select {
	case d := <-rx.Receipts():
		t.Errorf("extra receipt %s after all %d", d.ReceiptedID, n)
	case <-time.After(300 * time.Millisecond):
	}
}
