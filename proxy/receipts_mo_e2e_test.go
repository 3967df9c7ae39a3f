package proxy

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

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
