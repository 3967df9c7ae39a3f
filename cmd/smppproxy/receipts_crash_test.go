package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// dialBind binds to the proxy as shop with bind type bt once it accepts.
func dialBind(t *testing.T, addr string, bt smpp.BindType) *esme.Client {
	t.Helper()
	return dialUntilBound(t, addr, esme.Options{SystemID: "shop", Password: "secret", Bind: bt, Timeout: 5 * time.Second})
}

// `smppproxy serve` is killed (SIGKILL) with receipts
// queued for an ESME that is not bound, and more receipts arrive while it
// is down (the SMSC keeps resending them); after the restart the ESME binds
// and gets every one of them.
func TestKill9WithQueuedReceiptsLosesNone(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	smsc, err := sim.Start("127.0.0.1:0", sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer smsc.Close()
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
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()

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
