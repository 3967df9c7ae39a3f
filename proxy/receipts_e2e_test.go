package proxy

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// Hex in the response and decimal in the receipt (and
// the reverse, and the id only in the receipt text) → matched; the ESME
// sees the id of its submit_sm_resp in both receipt fields.
func TestReceiptIDFormatsAreNormalised(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		smsc          sim.Config
		resp, receipt config.IDFormat
	}{
		"hex response, decimal receipt": {sim.Config{HexIDs: true, ReceiptIDs: "dec"}, config.IDHex, config.IDDec},
		"decimal response, hex receipt": {sim.Config{ReceiptIDs: "hex"}, config.IDDec, config.IDHex},
		"hex response, decimal text":    {sim.Config{HexIDs: true, ReceiptIDs: "dec", ReceiptTextOnly: true}, config.IDHex, config.IDDec},
		"as-is both":                    {sim.Config{HexIDs: true}, config.IDAsIs, config.IDAsIs},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.smsc.DLRDelay = 20 * time.Millisecond
			smsc := startSim(t, tc.smsc)
			cfg := receiptConfig(t, smsc.Addr())
			cfg.Upstreams[0].RespIDFormat, cfg.Upstreams[0].ReceiptIDFormat = tc.resp, tc.receipt
			app, reg := startReceiptsProxy(t, cfg)
			c := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
			id := submitDLR(t, c, "fmt-1")
			d := receive(t, c, 1, 5*time.Second)[0]
			if d.ReceiptedID != id || textID(d) != id || d.Stat != "DELIVRD" {
				t.Errorf("receipt: TLV id %q, text id %q, stat %s; want %q in both, DELIVRD", tlvID(d), textID(d), d.Stat, id)
			}
			if tc.smsc.ReceiptTextOnly && tlvID(d) != "" {
				t.Errorf("receipt got a receipted_message_id %q the SMSC did not send", tlvID(d))
			}
			if rid := smsc.ReceiptID(id); rid == id && tc.resp != config.IDAsIs {
				t.Fatalf("the simulator wrote the receipt id as %q, the same as the response: the test proves nothing", rid)
			}
			rec := recordOf(t, app.Store(), id)
			if rec.Delivery != state.DeliveryDelivered || rec.DeliveryAt.IsZero() || rec.State != state.Accepted {
				t.Errorf("record: state %s, delivery %q at %v; want accepted, delivered, a time", rec.State, rec.Delivery, rec.DeliveryAt)
			}
			// A receipt may overtake the write of its submit's outcome (the
			// SMSC sends it 20ms after its answer): it is then kept, and
			// must match by its id once the outcome is written.
			unmatched := metric(t, reg, "smppproxy_receipts_total", map[string]string{"outcome": "unmatched"})
			later := metric(t, reg, "smppproxy_receipts_total", map[string]string{"outcome": "matched_later"})
			if unmatched != later {
				t.Errorf("%v receipts unmatched at first, %v of them matched by id later; want every receipt matched by its id", unmatched, later)
			}
		})
	}
}

// The ESME binds RX only after 100 receipts were
// produced → it receives all 100, in order, each once after it
// acknowledged them.
func TestReceiptsQueuedUntilTheESMEBinds(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{HexIDs: true})
	app, reg := startReceiptsProxy(t, receiptConfig(t, smsc.Addr()))
	tx := bindESME(t, app.Addr(), "shop", smpp.BindTransmitter, false)
	ids := submitForReceipts(t, tx, "q", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids { // produced in this order, each acknowledged by the proxy
		if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
			t.Fatalf("receipt %s: proxy answered %v, %v; want 0", id, st, err)
		}
	}
	if n := len(queued(t, app.Store(), "shop")); n != 100 {
		t.Fatalf("%d receipts queued before the bind, want 100", n)
	}
	if got := metric(t, reg, "smppproxy_receipts_queue_depth", map[string]string{"account": "shop"}); got != 100 {
		t.Errorf("queue depth gauge = %v, want 100", got)
	}

	rx := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, false)
	got := receive(t, rx, 100, 10*time.Second)
	var gotIDs []string
	for _, d := range got {
		gotIDs = append(gotIDs, d.ReceiptedID)
	}
	if !slices.Equal(gotIDs, ids) {
		t.Errorf("receipts arrived as\n%v\nwant, in the order produced,\n%v", gotIDs, ids)
	}
	waitFor(t, 5*time.Second, "queue drained", func() bool { return len(queued(t, app.Store(), "shop")) == 0 })
	none(t, rx, 1500*time.Millisecond, "after every receipt was acknowledged (dlr_redelivery 1s)")
	if n := metric(t, reg, "smppproxy_receipts_deliveries_total", map[string]string{"account": "shop", "outcome": "acked"}); n != 100 {
		t.Errorf("%v acknowledged deliveries, want 100", n)
	}
}

// The ESME drops the connection without answering 10
// receipts → they are delivered again on the next bind; none is lost.
func TestUnansweredReceiptsAreRedeliveredOnTheNextBind(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].DLRRedelivery = config.Duration(time.Minute) // only the rebind may redeliver
	app, reg := startReceiptsProxy(t, cfg)
	tx := bindESME(t, app.Addr(), "shop", smpp.BindTransmitter, false)
	ids := submitForReceipts(t, tx, "drop", 10)
	silent := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, true) // never answers
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
			t.Fatalf("receipt %s: %v, %v", id, st, err)
		}
	}
	first := receive(t, silent, 10, 5*time.Second)
	silent.Close()
	if n := len(queued(t, app.Store(), "shop")); n != 10 {
		t.Errorf("%d receipts queued after the drop, want all 10", n)
	}

	again := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, false)
	second := receive(t, again, 10, 5*time.Second)
	var a, b []string
	for i := range first {
		a, b = append(a, first[i].ReceiptedID), append(b, second[i].ReceiptedID)
	}
	slices.Sort(a)
	slices.Sort(b)
	sorted := slices.Sorted(slices.Values(ids))
	if !slices.Equal(a, sorted) {
		t.Errorf("the silent session got %v, want every one of %v", a, sorted)
	}
	if !slices.Equal(b, sorted) {
		t.Errorf("after the rebind got %v, want every one of %v", b, sorted)
	}
	waitFor(t, 5*time.Second, "queue drained", func() bool { return len(queued(t, app.Store(), "shop")) == 0 })
	// Each of the 10 was lost with the session at least once; a dispatcher
	// that tried the closing session again before it noticed counts more.
	if n := metric(t, reg, "smppproxy_receipts_deliveries_total", map[string]string{"outcome": "session_lost"}); n < 10 {
		t.Errorf("%v deliveries lost with the session, want at least 10", n)
	}
}

// Two ESME accounts on one upstream → each gets only its
// own receipts.
func TestTwoAccountsGetOnlyTheirOwnReceipts(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{DLRDelay: 20 * time.Millisecond})
	app, _ := startReceiptsProxy(t, receiptConfig(t, smsc.Addr()))
	mine := map[string]map[string]bool{}
	clients := map[string]*esme.Client{}
	for _, acct := range []string{"shop", "bank"} {
		c := bindESME(t, app.Addr(), acct, smpp.BindTransceiver, false)
		clients[acct] = c
		mine[acct] = map[string]bool{}
		for _, k := range keys(acct, 5) {
			mine[acct][submitDLR(t, c, k)] = true
		}
	}
	for acct, c := range clients {
		for _, d := range receive(t, c, 5, 5*time.Second) {
			if !mine[acct][d.ReceiptedID] {
				t.Errorf("%s got receipt %s, which is not one of its messages", acct, d.ReceiptedID)
			}
			delete(mine[acct], d.ReceiptedID)
		}
		none(t, c, 200*time.Millisecond, acct)
	}
}

// A response lost upstream, then its receipt arrives →
// the record becomes accepted with that id and the client's retry is
// answered with it.
func TestLostResponseIsHealedByItsReceipt(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{DLRDelay: 50 * time.Millisecond, Fault: func(c sim.Call) sim.Action {
		return sim.Action{LoseResponse: string(c.Submit.DstAddr) == "447700900777"}
	}})
	app, reg := startReceiptsProxy(t, receiptConfig(t, smsc.Addr()))
	c := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
	submit := esme.Submit{Src: "SHOP", Dst: "447700900777", Text: []byte("Your code is 424242"), Key: "otp-lost", RegisteredDelivery: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := c.Submit(ctx, submit)
	if err != nil || first.Status != smpp.StatusSysErr {
		t.Fatalf("submit whose response is lost = %+v, %v; want unknown_status 0x08", first, err)
	}
	d := receive(t, c, 1, 5*time.Second)[0]
	if d.ReceiptedID == "" || textID(d) != d.ReceiptedID {
		t.Fatalf("receipt ids: TLV %q, text %q; want the SMSC's id in both", d.ReceiptedID, textID(d))
	}
	var rec *state.Record
	waitFor(t, 5*time.Second, "record accepted", func() bool {
		rec = recordOf(t, app.Store(), d.ReceiptedID)
		return rec.State == state.Accepted
	})
	if last := rec.History[len(rec.History)-2]; !strings.Contains(last.Note, "resolved by receipt") {
		t.Errorf("history %+v; want the resolution and its reason", rec.History)
	}
	retry, err := c.Submit(ctx, submit)
	if err != nil || retry.Status != 0 || retry.MessageID != d.ReceiptedID {
		t.Errorf("retry = %+v, %v; want status 0 with %q", retry, err, d.ReceiptedID)
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("the SMSC received %d submits, want 1", n)
	}
	// The counter follows the record update (the receipt is delivered first).
	waitFor(t, 5*time.Second, "one receipt counted as reconciled", func() bool {
		return metric(t, reg, "smppproxy_receipts_total", map[string]string{"outcome": "reconciled"}) == 1
	})
}

// Message_id: proxy rewrites both receipt fields to the
// proxy id; passthrough changes neither (the receipt arrives byte for
// byte as the SMSC sent it).
func TestProxyIDsRewriteReceiptsPassthroughDoesNot(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{DLRDelay: 20 * time.Millisecond})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].MessageID = config.MessageIDProxy // shop: proxy ids; bank: passthrough
	app, _ := startReceiptsProxy(t, cfg)
	shop := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
	bank := bindESME(t, app.Addr(), "bank", smpp.BindTransceiver, false)

	pid := submitDLR(t, shop, "p-1")
	rec := recordOf(t, app.Store(), pid)
	if rec.ProxyID != pid || rec.MessageID == pid || len(pid) > 64 {
		t.Fatalf("proxy mode: the ESME got %q, record proxy id %q, upstream id %q; want a proxy id (≤ 64 octets) unlike the upstream's", pid, rec.ProxyID, rec.MessageID)
	}
	d := receive(t, shop, 1, 5*time.Second)[0]
	if tlvID(d) != pid || textID(d) != pid || d.Stat != "DELIVRD" {
		t.Errorf("proxy mode receipt: TLV %q, text %q, stat %s; want %q in both", tlvID(d), textID(d), d.Stat, pid)
	}
	if strings.Contains(string(d.Text), rec.MessageID) {
		t.Errorf("proxy mode receipt text %q still names the upstream id %q", d.Text, rec.MessageID)
	}

	uid := submitDLR(t, bank, "u-1")
	d = receive(t, bank, 1, 5*time.Second)[0]
	if tlvID(d) != uid || textID(d) != uid {
		t.Errorf("passthrough receipt: TLV %q, text %q; want %q", tlvID(d), textID(d), uid)
	}
	if strings.Contains(string(d.Text), "order u-1") || !strings.HasSuffix(string(d.Text), "text:") {
		t.Errorf("passthrough receipt text %q still carries the start of the message; want it dropped after text:", d.Text)
	}
	asSent := func() bool { // the SMSC notes it once it has the proxy's deliver_sm_resp
		for _, b := range smsc.Sent() {
			if bytes.Equal(withoutTextContent(b), d.Frame[smpp.HeaderLen:]) {
				return true
			}
		}
		return false
	}
	waitFor(t, 2*time.Second, "passthrough receipt byte for byte as the SMSC sent it, but for the text: content", asSent)
}

// withoutTextContent is a receipt deliver_sm body (short_message starting
// "id:") with what follows "text:" removed, as the proxy passes it on.
func withoutTextContent(b []byte) []byte {
	p := bytes.Index(b, []byte("id:")) - 1
	if p < 0 {
		return b
	}
	n := int(b[p])
	if p+1+n > len(b) {
		return b
	}
	sm := b[p+1 : p+1+n]
	i := bytes.Index(sm, []byte("text:"))
	if i < 0 {
		return b
	}
	sm = sm[:i+len("text:")]
	out := append([]byte(nil), b[:p]...)
	out = append(out, byte(len(sm)))
	out = append(out, sm...)
	return append(out, b[p+1+n:]...)
}

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
	ids := submitForReceipts(t, tx, "burst", 50)
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

// SPEC §4: intermediate receipts are forwarded; the same receipt twice
// from the upstream is acknowledged both times and forwarded once.
func TestIntermediateForwardedDuplicateOnce(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{})
	app, reg := startReceiptsProxy(t, receiptConfig(t, smsc.Addr()))
	c := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
	id := submitDLR(t, c, "dup-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, stat := range []string{"ENROUTE", "DELIVRD", "DELIVRD"} {
		if st, err := smsc.SendReceipt(ctx, id, stat); err != nil || st != 0 {
			t.Fatalf("receipt %s: proxy answered %v, %v; want 0 every time", stat, st, err)
		}
	}
	got := receive(t, c, 2, 5*time.Second)
	if got[0].Stat != "ENROUTE" || got[1].Stat != "DELIVRD" || got[0].ReceiptedID != id || got[1].ReceiptedID != id {
		t.Errorf("receipts: %s %s, %s %s; want ENROUTE then DELIVRD for %s", got[0].Stat, got[0].ReceiptedID, got[1].Stat, got[1].ReceiptedID, id)
	}
	none(t, c, 300*time.Millisecond, "the duplicate DELIVRD")
	if n := metric(t, reg, "smppproxy_receipts_total", map[string]string{"outcome": "duplicate"}); n != 1 {
		t.Errorf("%v duplicates counted, want 1", n)
	}
}

// SPEC §4: MO is routed by mo_routes (destination prefix), else
// default_account, through the same queue.
func TestMORoutedByPrefixElseDefaultAccount(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.MORoutes = []config.MORoute{{Prefix: "4477", Account: "bank"}}
	cfg.DefaultAccount = "shop"
	app, _ := startReceiptsProxy(t, cfg)
	shop := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, false)
	bank := bindESME(t, app.Addr(), "bank", smpp.BindReceiver, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mo := range []struct{ dst, text string }{{"447712345678", "STOP"}, {"33612345678", "OUI"}} {
		if st, err := smsc.SendMO(ctx, "", "447700900123", mo.dst, []byte(mo.text)); err != nil || st != 0 {
			t.Fatalf("MO to %s: proxy answered %v, %v", mo.dst, st, err)
		}
	}
	for acct, want := range map[string]struct {
		c         *esme.Client
		dst, text string
	}{"bank": {bank, "447712345678", "STOP"}, "shop": {shop, "33612345678", "OUI"}} {
		d := receive(t, want.c, 1, 5*time.Second)[0]
		if d.IsReceipt() || d.Dst != want.dst || string(d.Text) != want.text || d.Src != "447700900123" {
			t.Errorf("%s got MO %s → %s %q (receipt %v); want 447700900123 → %s %q", acct, d.Src, d.Dst, d.Text, d.IsReceipt(), want.dst, want.text)
		}
		none(t, want.c, 200*time.Millisecond, acct)
	}
	if n := len(queued(t, app.Store(), "shop")) + len(queued(t, app.Store(), "bank")); n != 0 {
		t.Errorf("%d MO still queued after the acknowledgements (MO content must not stay stored)", n)
	}
}

// SPEC §6: query_sm and cancel_sm go to the upstream that holds the
// message, with its id; the ESME names it and gets the answer with the id
// it knows (proxy-issued or not).
func TestQueryAndCancelGoToTheUpstreamWithItsID(t *testing.T) {
	t.Parallel()
	smsc := startSim(t, sim.Config{HexIDs: true})
	cfg := receiptConfig(t, smsc.Addr())
	cfg.Accounts[0].MessageID = config.MessageIDProxy
	app, _ := startReceiptsProxy(t, cfg)
	shop := bindESME(t, app.Addr(), "shop", smpp.BindTransceiver, false)
	bank := bindESME(t, app.Addr(), "bank", smpp.BindTransceiver, false)
	pid := submitDLR(t, shop, "q-1")
	uid := submitDLR(t, bank, "q-2")
	upstreamOf := recordOf(t, app.Store(), pid).MessageID

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	query := func(c *esme.Client, id string) (smpp.Status, string) {
		t.Helper()
		body := append([]byte(id), 0, 0, 0)
		body = append(append(body, "SHOP"...), 0)
		f, err := c.Request(ctx, smpp.CmdQuerySM, body)
		if err != nil {
			t.Fatalf("query_sm %s: %v", id, err)
		}
		h := smpp.ParseHeader(f)
		if h.ID != smpp.CmdQuerySM|smpp.RespBit {
			t.Fatalf("query_sm %s answered with command 0x%08X", id, h.ID)
		}
		b := f[smpp.HeaderLen:]
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return h.Status, string(b)
	}
	if st, id := query(shop, pid); st != 0 || id != pid {
		t.Errorf("query_sm(proxy id) = %v %q, want 0 %q", st, id, pid)
	}
	if st, id := query(bank, uid); st != 0 || id != uid {
		t.Errorf("query_sm(upstream id) = %v %q, want 0 %q", st, id, uid)
	}
	if st, _ := query(bank, pid); st != smpp.StatusInvMsgID {
		t.Errorf("query_sm of another account's message = %v, want ESME_RINVMSGID", st)
	}
	if st, _ := query(shop, "nope"); st != smpp.StatusInvMsgID {
		t.Errorf("query_sm of an unknown id = %v, want ESME_RINVMSGID", st)
	}
	if q := smsc.Queried(); !slices.Equal(q, []string{upstreamOf, uid}) {
		t.Errorf("the SMSC was asked about %v, want [%s %s] (upstream ids only)", q, upstreamOf, uid)
	}

	body := []byte{0}
	body = append(append(body, pid...), 0, 0, 0)
	body = append(append(body, "SHOP"...), 0, 0, 0)
	body = append(append(body, "447700900123"...), 0)
	f, err := shop.Request(ctx, smpp.CmdCancelSM, body)
	if h := smpp.ParseHeader(f); err != nil || h.ID != smpp.CmdCancelSM|smpp.RespBit || h.Status != 0 {
		t.Errorf("cancel_sm(proxy id) = %+v, %v; want cancel_sm_resp 0", h, err)
	}
	if q := smsc.Queried(); len(q) != 3 || q[2] != upstreamOf {
		t.Errorf("the SMSC got cancel_sm for %v, want %s last", q, upstreamOf)
	}
}
