package interop

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
)

func dialESME(t *testing.T, addr string) *esme.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := esme.Dial(ctx, addr, esme.Options{SystemID: "shop", Password: "secret", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("esme bind: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func submit(t *testing.T, c *esme.Client, s esme.Submit) esme.Resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Submit(ctx, s)
	if err != nil {
		t.Fatalf("submit %q: %v", s.Key, err)
	}
	return r
}

// ucs2 "Ω 42" (data_coding 0x08): the bytes must reach the SMSC as sent.
var ucs2Text = []byte{0x03, 0xA9, 0x00, 0x20, 0x00, 0x34, 0x00, 0x32}

func orderSubmit() esme.Submit {
	return esme.Submit{
		Src: "SHOP", SrcTON: 5, Dst: "447700900123", DstTON: 1, DstNPI: 1,
		Text: ucs2Text, DataCoding: 0x08, RegisteredDelivery: 1,
		Key:  "order-42",
		TLVs: []smpp.TLV{{Tag: 0x0204, Value: []byte{0x12, 0x34}}}, // user_message_reference
	}
}

// Test 2: the proxy's upstream side (gosmpp connectors, then the proxy's
// own read/write loops) against a fiorix smpptest.Server as the SMSC.
func TestProxyToFiorixSMSC(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{receipts: true})
	cfg := testConfig(t, smsc.Addr())
	cfg.Upstreams[0].Binds = 1
	app := startProxy(t, cfg)

	c1 := dialESME(t, app.Addr())
	r := submit(t, c1, orderSubmit())
	if r.Status != 0 || r.MessageID != "F1" {
		t.Fatalf("first submit: status %v, id %q; want 0, F1 (smpptest's id)", r.Status, r.MessageID)
	}

	// What smpptest decoded: everything as sent, minus the key TLV.
	subs := smsc.wantSubmits(t, 1)
	got := subs[0]
	if got.srcAddr != "SHOP" || got.dstAddr != "447700900123" {
		t.Errorf("addresses %q → %q, want SHOP → 447700900123", got.srcAddr, got.dstAddr)
	}
	if got.dataCoding != 0x08 || !bytes.Equal(got.shortMessage, ucs2Text) {
		t.Errorf("data_coding 0x%02X, short_message % X; want 0x08, % X", got.dataCoding, got.shortMessage, ucs2Text)
	}
	if got.registered != 1 || got.esmClass != 0 {
		t.Errorf("registered_delivery %d, esm_class 0x%02X; want 1, 0", got.registered, got.esmClass)
	}
	if v, ok := got.tlvs[keyTag]; ok {
		t.Errorf("the key TLV 0x1400 reached the SMSC (%q): it must be stripped", v)
	}
	if v := got.tlvs[pdutlv.TagUserMessageReference]; !bytes.Equal(v, []byte{0x12, 0x34}) {
		t.Errorf("user_message_reference % X, want 12 34 (other TLVs pass through)", v)
	}
	if len(got.tlvs) != 1 {
		t.Errorf("smpptest decoded TLVs %v, want only 0x0204", got.tlvs)
	}

	// smpptest sent a receipt built by fiorix right after the response:
	// it is acknowledged upstream and reaches the ESME with the id.
	select {
	case d := <-c1.Receipts():
		if !d.IsReceipt() || d.ReceiptedID != "F1" || d.Stat != "DELIVRD" {
			t.Errorf("receipt %+v, want receipted id F1, DELIVRD", d)
		}
		if v, ok := d.TLV(0x001E); !ok || string(bytes.TrimRight(v, "\x00")) != "F1" {
			t.Errorf("receipted_message_id TLV %q, want F1", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the receipt smpptest sent never reached the ESME")
	}
	if !testkit.Poll(2*time.Second, func() bool { sent, ok := smsc.Acked(); return sent == 1 && ok == 1 }) {
		sent, ok := smsc.Acked()
		t.Errorf("smpptest sent %d receipts, %d answered with status 0; want 1, 1", sent, ok)
	}

	// Retries, on the same session and on a new one: replayed.
	if r2 := submit(t, c1, orderSubmit()); r2.Status != 0 || r2.MessageID != "F1" {
		t.Errorf("retry: status %v, id %q; want 0, F1", r2.Status, r2.MessageID)
	}
	c1.Close()
	c2 := dialESME(t, app.Addr())
	if r3 := submit(t, c2, orderSubmit()); r3.Status != 0 || r3.MessageID != "F1" {
		t.Errorf("retry after reconnecting: status %v, id %q; want 0, F1", r3.Status, r3.MessageID)
	}
	// Same key, other text: conflict.
	other := orderSubmit()
	other.Text = []byte{0x00, 0x41}
	if r4 := submit(t, c2, other); r4.Status != 0x400 {
		t.Errorf("same key, other text: status %v, want 0x400", r4.Status)
	}
	// A new key: forwarded, a new id.
	next := orderSubmit()
	next.Key, next.RegisteredDelivery = "order-43", 0
	if r5 := submit(t, c2, next); r5.Status != 0 || r5.MessageID != "F2" {
		t.Errorf("new key: status %v, id %q; want 0, F2", r5.Status, r5.MessageID)
	}
	if n := len(smsc.Submits()); n != 2 {
		t.Errorf("smpptest received %d submit_sm, want 2 (one per key)", n)
	}
	if o := smsc.Other(); len(o) != 0 {
		t.Errorf("the proxy sent smpptest unexpected PDUs %v", o)
	}
}

// forward_key_tlv: true keeps the key on the forwarded submit, as sent.
func TestProxyToFiorixSMSCForwardKey(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	cfg := testConfig(t, smsc.Addr())
	cfg.Upstreams[0].Binds = 1
	cfg.Upstreams[0].ForwardKeyTLV = true
	app := startProxy(t, cfg)
	c := dialESME(t, app.Addr())
	for range 2 {
		if r := submit(t, c, orderSubmit()); r.Status != 0 || r.MessageID != "F1" {
			t.Fatalf("submit: status %v, id %q; want 0, F1", r.Status, r.MessageID)
		}
	}
	subs := smsc.wantSubmits(t, 1)
	if v := subs[0].tlvs[keyTag]; string(v) != "order-42" {
		t.Errorf("key TLV at the SMSC %q, want order-42", v)
	}
}

// The proxy's upstream keep-alive against smpptest: enquire_link is sent
// when the bind is idle, smpptest's enquire_link_resp (decoded by the
// proxy's own reader) keeps it alive past the 3×enquire_link idle limit,
// and the same bind still forwards.
func TestProxyEnquireLinkToFiorixSMSC(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	cfg := testConfig(t, smsc.Addr())
	cfg.Upstreams[0].Binds = 1
	cfg.Upstreams[0].EnquireLink = config.Duration(100 * time.Millisecond)
	app := startProxy(t, cfg)
	upstreamIDs := func() []string {
		var ids []string
		for _, s := range app.Sessions.List() {
			if s.Side == session.SideUpstream {
				ids = append(ids, s.ID+"/"+s.State)
			}
		}
		return ids
	}
	before := upstreamIDs()
	t.Logf("upstream sessions %v", before)
	if !testkit.Poll(3*time.Second, func() bool { return smsc.EnquireLinks() >= 5 }) {
		t.Fatalf("smpptest saw %d enquire_link in 3s, want 5 (one per 100ms idle)", smsc.EnquireLinks())
	}
	if after := upstreamIDs(); len(before) != 1 || !slices.Equal(before, after) {
		t.Errorf("upstream sessions %v, then %v: want the same single bind (no idle close, no rebind)", before, after)
	}
	c := dialESME(t, app.Addr())
	if r := submit(t, c, orderSubmit()); r.Status != 0 || r.MessageID != "F1" {
		t.Errorf("submit after idling: status %v, id %q; want 0, F1", r.Status, r.MessageID)
	}
}

// smpptest drops the connection instead of answering a submit: the
// outcome is ambiguous, so the submit is answered unknown_status (0x08)
// and a retry is held (not resent); the proxy rebinds to smpptest (gosmpp
// connector again) and the next key goes through.
func TestFiorixSMSCDisconnectsMidSubmit(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{disconnect: func(r received) bool { return string(r.shortMessage) == "lost" }})
	cfg := testConfig(t, smsc.Addr())
	cfg.Upstreams[0].Binds = 1
	app := startProxy(t, cfg)
	c := dialESME(t, app.Addr())

	lost := orderSubmit()
	lost.Key, lost.Text, lost.DataCoding, lost.RegisteredDelivery = "lost-1", []byte("lost"), 0, 0
	if r := submit(t, c, lost); r.Status != 0x08 {
		t.Errorf("submit whose connection dropped: status %v, want 0x08 (unknown_status)", r.Status)
	}
	if r := submit(t, c, lost); r.Status != 0x08 {
		t.Errorf("retry of the unknown submit: status %v, want 0x08 (held)", r.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(ctx); err != nil {
		t.Fatalf("no rebind to smpptest: %v", err)
	}
	next := orderSubmit()
	next.RegisteredDelivery = 0
	if r := submit(t, c, next); r.Status != 0 || r.MessageID != "F2" {
		t.Errorf("next key after the rebind: status %v, id %q; want 0, F2", r.Status, r.MessageID)
	}
	if n := len(smsc.Submits()); n != 2 {
		t.Errorf("smpptest received %d submit_sm, want 2 (the lost one once, the next one)", n)
	}
}
