package proxy

import (
	"context"
	"testing"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// query_sm and cancel_sm are forwarded upstream, where each takes a
// window slot and a throughput token of the upstream every account routed
// there shares: they count against the account's throughput as submits
// do, so that one account cannot spend the upstream's capacity on them
// (from review: an account limited to 1 submit/s sent query_sm as fast as
// its window allowed, and another account's submits got 0x58).
func TestQueriesAndCancelsCountAgainstTheAccountsThroughput(t *testing.T) {
	smsc := startSim(t, sim.Config{HexIDs: true})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].Throughput = 1 // shop: one token a second, burst 1
	app, reg := startReceiptsProxy(t, cfg)
	shop := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
	pid := submitDLR(t, shop, "q-1") // takes the token
	query := append(append(append([]byte(pid), 0, 0, 0), "SHOP"...), 0)
	cancel := append(append(append(append([]byte{0}, pid...), 0, 0, 0), "SHOP"...), 0, 0, 0)
	cancel = append(cancel, "447700900123"...)
	cancel = append(cancel, 0)
	throttled := 0
	for i := range 6 {
		cmd, body := smpp.CmdQuerySM, query
		if i%2 == 1 {
			cmd, body = smpp.CmdCancelSM, cancel
		}
		f, err := shop.Request(context.Background(), cmd, body)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if smpp.ParseHeader(f).Status == smpp.StatusThrottled {
			throttled++
		}
	}
	// A token comes back each second: of six sent back to back, at most
	// one may pass.
	if throttled < 5 || len(smsc.Queried()) > 1 {
		t.Errorf("%d of 6 query_sm/cancel_sm answered 0x58, %d forwarded to the SMSC; want at least 5 refused at once", throttled, len(smsc.Queried()))
	}
	if got := metric(t, reg, "smppproxy_esme_throttled_total", map[string]string{"account": "shop", "reason": "throughput"}); got < 5 {
		t.Errorf("smppproxy_esme_throttled_total{shop,throughput} = %v, want at least 5", got)
	}
}

// A query_sm from a session that may not send (a receiver bind) is
// refused for its bind, and takes none of the account's throughput.
func TestAQueryFromAReceiverBindTakesNoThroughput(t *testing.T) {
	smsc := startSim(t, sim.Config{HexIDs: true})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].Throughput = 1 // shop
	app, reg := startReceiptsProxy(t, cfg)
	rx := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, false)
	query := append(append([]byte("3e8"), 0, 0, 0), "SHOP"...)
	query = append(query, 0)
	for i := range 3 {
		f, err := rx.Request(context.Background(), smpp.CmdQuerySM, query)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if st := smpp.ParseHeader(f).Status; st != smpp.StatusInvBndSts {
			t.Errorf("query_sm %d from a receiver bind = %v, want ESME_RINVBNDSTS", i, st)
		}
	}
	if got := metric(t, reg, "smppproxy_esme_throttled_total", map[string]string{"account": "shop", "reason": "throughput"}); got != 0 {
		t.Errorf("smppproxy_esme_throttled_total{shop,throughput} = %v, want 0", got)
	}
}
