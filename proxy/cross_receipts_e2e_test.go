package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// transmitterOnly makes the instance bind to the SMSC as a transmitter:
// the SMSC's receipts and MO all reach the other instance.
func transmitterOnly(cfg *config.Config) { cfg.Upstreams[0].Bind = config.BindTransmitter }

// drainedOnce waits for account shop's delivery queue to be empty and then
// collects what rx received meanwhile (and still holds), by key.
func drainedOnce(t *testing.T, app *App, rx *esme.Client, key func(esme.Deliver) string, got map[string]int) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, func() bool { return len(queued(t, app.Store(), "shop")) == 0 }, "the delivery queue empty")
	for {
		select {
		case d := <-rx.Receipts():
			got[key(d)]++
		default:
			return
		}
	}
}

// The SMSC answers A's submit while A cannot write to the store, and sends
// the receipt at once; the receipt reaches B (A binds as a transmitter),
// which finds no record by its id (A's accept is not written yet) and
// keeps it unmatched. Once A writes its accept, B matches the kept receipt
// and it is delivered, once, to the ESME receiver bound on A.
func TestReceiptBeforeTheAcceptIsWrittenReachesTheESMEOnTheOtherInstanceOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	relayA, dsnA := pgtest.ThroughRelay(t, dsn)
	// The answer waits until A has lost the store; the receipt follows it
	// at once.
	answer := make(chan struct{})
	smsc := startSim(t, sim.Config{DLRDelay: time.Millisecond, Fault: func(sim.Call) sim.Action {
		<-answer
		return sim.Action{}
	}})
	a := startShared(t, smsc.Addr(), dsnA, schema, "a", func(cfg *config.Config) {
		transmitterOnly(cfg)
		cfg.Upstreams[0].ResponseTimeout = config.Duration(5 * time.Second)
	})
	t.Cleanup(relayA.Heal)
	b := startShared(t, smsc.Addr(), dsn, schema, "b", nil)
	rxA := dialClient(t, a.Addr(), smpp.BindReceiver)
	txA := dialClient(t, a.Addr(), smpp.BindTransmitter)

	pending := txA.SubmitAsync(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "early-1", RegisteredDelivery: 1, Text: []byte("your code is 5555")})
	testkit.Eventually(t, 10*time.Second, func() bool { return smsc.Total() == 1 }, "A's submit at the SMSC")
	relayA.Cut()
	close(answer)
	var kept string
	testkit.Eventually(t, 10*time.Second, func() bool {
		u, err := b.receipts.Unmatched(t.Context(), "", 10)
		if err != nil || len(u) != 1 {
			return false
		}
		kept = u[0].MessageID
		return true
	}, "the receipt kept unmatched on B while A's accept is not written")
	select {
	case d := <-rxA.Receipts():
		t.Fatalf("receipt %q delivered before its record was accepted", d.ReceiptedID)
	default:
	}

	// The outcome could not be written: A answers ESME_RSYSERR and keeps
	// writing it in the background.
	select {
	case r := <-pending:
		if r.Err != nil || r.Resp.Status != smpp.StatusSysErr {
			t.Fatalf("A's answer while it cannot write the outcome = %+v, %v; want ESME_RSYSERR", r.Resp, r.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A never answered its submit")
	}

	relayA.Heal()
	// The ESME's retry is answered by the outcome A wrote once it could.
	testkit.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r, err := txA.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "early-1", RegisteredDelivery: 1, Text: []byte("your code is 5555")})
		if err != nil || (r.Status != smpp.StatusOK && r.Status != smpp.StatusSysErr && r.Status != smpp.StatusThrottled) {
			t.Fatalf("retry on A = %+v, %v; want accepted (or 0x08/0x58 until the outcome is written)", r, err)
		}
		if r.Status == smpp.StatusOK && r.MessageID != kept {
			t.Fatalf("retry on A accepted with id %q, want the SMSC's %q", r.MessageID, kept)
		}
		return r.Status == smpp.StatusOK
	}, "the retry on A accepted once A wrote the outcome")
	if smsc.Total() != 1 {
		t.Errorf("submits at the SMSC = %d, want 1", smsc.Total())
	}
	var d esme.Deliver
	select {
	case d = <-rxA.Receipts():
	case <-time.After(30 * time.Second):
		t.Fatal("the kept receipt never reached the ESME on A")
	}
	if d.ReceiptedID != kept || d.Stat != "DELIVRD" {
		t.Errorf("receipt on A = id %q stat %q, want %q DELIVRD", d.ReceiptedID, d.Stat, kept)
	}
	got := map[string]int{d.ReceiptedID: 1}
	drainedOnce(t, a, rxA, func(d esme.Deliver) string { return d.ReceiptedID }, got)
	if got[kept] != 1 || len(got) != 1 {
		t.Errorf("receipts delivered on A = %v, want %q once", got, kept)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		u, err := b.receipts.Unmatched(t.Context(), "", 10)
		return err == nil && len(u) == 0
	}, "no receipt left unmatched")
	if rec := recordOf(t, b.Store(), kept); rec.Delivery != "delivered" {
		t.Errorf("record's delivery state = %q, want delivered", rec.Delivery)
	}
}

// An MO arriving on B's upstream bind (A binds as a transmitter) is queued
// in the shared store and delivered to the ESME receiver bound on A, once.
func TestMOOnOneInstanceReachesTheReceiverOnTheOtherOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	smsc := startSim(t, sim.Config{})
	withDefault := func(cfg *config.Config) { cfg.DefaultAccount = "shop" }
	a := startShared(t, smsc.Addr(), dsn, schema, "a", func(cfg *config.Config) { transmitterOnly(cfg); withDefault(cfg) })
	startShared(t, smsc.Addr(), dsn, schema, "b", withDefault)
	rxA := dialClient(t, a.Addr(), smpp.BindReceiver)

	const n = 10
	texts := map[string]bool{}
	for i := range n {
		text := "reply " + string(rune('a'+i))
		texts[text] = true
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		st, err := smsc.SendMO(ctx, "proxy", "447700900123", "SHOP", []byte(text))
		cancel()
		if err != nil || st != smpp.StatusOK {
			t.Fatalf("MO %d: %v, %v; want accepted (by B, the only receiving bind)", i, st, err)
		}
	}
	got := map[string]int{}
	for len(got) < n {
		select {
		case d := <-rxA.Receipts():
			if d.EsmClass&0x04 != 0 {
				t.Fatalf("a receipt on A: %+v, want only MO", d)
			}
			got[string(d.Text)]++
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d MO reached the receiver on A", len(got), n)
		}
	}
	drainedOnce(t, a, rxA, func(d esme.Deliver) string { return string(d.Text) }, got)
	for text := range texts {
		if got[text] != 1 {
			t.Errorf("MO %q delivered %d times on A, want once", text, got[text])
		}
	}
	if len(got) != n {
		t.Errorf("MO delivered on A = %v, want exactly the %d sent", got, n)
	}
}
