package proxy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// An account's dlr_window bounds the deliver_sm its receiving session has
// not answered: with dlr_window 2 and 5 receipts queued, a receiver that
// answers nothing gets 2, in queue order; each answer lets the next one
// through, and all 5 arrive once each.
func TestDLRWindowBoundsUnansweredDeliverSM(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{HexIDs: true})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].DLRWindow = 2
	cfg.Accounts[0].DLRRedelivery = config.Duration(time.Minute) // nothing is sent twice here
	app, _ := startReceiptsProxy(t, cfg)
	tx := bindESME(t, app.Addr(), "shop", smpp.BindTransmitter, false)
	ids := submitForReceipts(t, tx, "win", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
			t.Fatalf("receipt %s: proxy answered %v, %v; want 0", id, st, err)
		}
	}

	rx := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, true)
	var got []string
	unanswered := receive(t, rx, 2, 10*time.Second)
	for range 3 {
		none(t, rx, 200*time.Millisecond, "a deliver_sm beyond dlr_window")
		d := unanswered[0]
		got = append(got, d.ReceiptedID)
		if err := rx.AckDeliver(d.Seq, smpp.StatusOK); err != nil {
			t.Fatal(err)
		}
		unanswered = append(unanswered[1:], receive(t, rx, 1, 10*time.Second)...)
	}
	for _, d := range unanswered {
		got = append(got, d.ReceiptedID)
		if err := rx.AckDeliver(d.Seq, smpp.StatusOK); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("receipts for %v, want each of %v once, in order", got, ids)
	}
	none(t, rx, 200*time.Millisecond, "a receipt delivered twice")
}
