package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// An SMSC that flushes 50 receipts at once on one bind whose submit window
// is 10 gets all 50 acknowledged with status 0, and all 50 are queued for
// the account: receipt intake has its own window (deliver_window, default
// 1000), so the burst is not refused with ESME_RTHROTTLED (an SMSC that
// does not redeliver would lose those receipts).
func TestReceiptBurstLargerThanTheSubmitWindowIsAllQueued(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{ReceiptRetry: -1}) // no redelivery: a refusal is a loss
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Upstreams[0].Binds, cfg.Upstreams[0].Window = 1, 10
	app, _ := startReceiptsProxy(t, cfg)
	tx := bindESME(t, app.Addr(), "shop", smpp.BindTransmitter, false)
	var ids []string
	for _, k := range keys("burst", 50) {
		ids = append(ids, submitDLR(t, tx, k))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	statuses := make([]smpp.Status, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { statuses[i], errs[i] = smsc.SendReceipt(ctx, id, "DELIVRD") })
	}
	wg.Wait()
	refused := 0
	for i := range ids {
		if errs[i] != nil || statuses[i] != smpp.StatusOK {
			refused++
			t.Logf("receipt %s: proxy answered %v, %v", ids[i], statuses[i], errs[i])
		}
	}
	if refused > 0 {
		t.Errorf("%d of 50 receipts sent at once were not acknowledged with status 0", refused)
	}
	if n := len(queued(t, app.Store(), "shop")); n != 50 {
		t.Errorf("%d receipts queued, want 50", n)
	}
}

// upstreams[].deliver_window reaches the upstream's pool.
func TestDeliverWindowIsTheUpstreamsIntakeWindow(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Upstreams[0].DeliverWindow = 7
	app, _ := startReceiptsProxy(t, cfg)
	if got := app.pools[0].DeliverWindow(); got != 7 {
		t.Errorf("pool's DeliverWindow = %d, want deliver_window 7", got)
	}
}
