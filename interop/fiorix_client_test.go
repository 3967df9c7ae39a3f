package interop

import (
	"bytes"
	"strings"
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
)

// Test 1: a fiorix Transceiver is the ESME, the project's simulator the
// SMSC. The simulator answers in hex and writes receipts in decimal, so
// the receipt the fiorix client gets must have been rewritten by the
// proxy to the id of its submit_sm_resp.
func TestFiorixClientThroughProxy(t *testing.T) {
	smsc := startSim(t, sim.Config{HexIDs: true, ReceiptIDs: "dec", DLRDelay: 30 * time.Millisecond})
	cfg := testConfig(t, smsc.Addr())
	cfg.Upstreams[0].RespIDFormat, cfg.Upstreams[0].ReceiptIDFormat = config.IDHex, config.IDDec
	app := startProxy(t, cfg)
	sink := newReceiptSink()
	tc := dialFiorix(t, app.Addr(), sink)

	// The key as a C-octet string ("otp-1\x00"): the proxy trims the NUL.
	sm, err := tc.Submit(keyed(pdutlv.CString("otp-1"), pdutext.Raw("Your code is 123456")))
	if err != nil {
		t.Fatalf("first submit: %v", err)
	}
	id := sm.RespID()
	if id == "" {
		t.Fatal("first submit: empty message_id")
	}

	// The same key without the NUL, on the same session, with a
	// validity_period (fiorix writes it absolute: YYMMDDhhmmss000+), which
	// is not part of the fingerprint: replayed.
	retry := keyed(pdutlv.String("otp-1"), pdutext.Raw("Your code is 123456"))
	retry.Validity = 10 * time.Minute
	sm2, err := tc.Submit(retry)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := sm2.RespID(); got != id {
		t.Errorf("retry got message_id %q, want the first one %q", got, id)
	}

	// The same key from another fiorix session (a reconnecting client).
	tc2 := dialFiorix(t, app.Addr(), sink) // receipts go round-robin over both
	sm3, err := tc2.Submit(keyed("otp-1", pdutext.Raw("Your code is 123456")))
	if err != nil {
		t.Fatalf("retry on a new session: %v", err)
	}
	if got := sm3.RespID(); got != id {
		t.Errorf("retry on a new session got message_id %q, want %q", got, id)
	}

	// The same key for other text: conflict, surfaced by fiorix as the
	// pdu.Status error.
	_, err = tc.Submit(keyed("otp-1", pdutext.Raw("Your code is 654321")))
	wantStatus(t, err, 0x400, "same key, other text")

	if n := smsc.Total(); n != 1 {
		t.Errorf("the simulator received %d submit_sm, want 1", n)
	}

	// The receipt: the simulator wrote the id in decimal, the fiorix client
	// must see the hex id it was given, in the TLV and in the text.
	if rid := smsc.ReceiptID(id); rid == id {
		t.Fatalf("the simulator writes receipt id %q like the response: the rewrite is not exercised", rid)
	}
	d := sink.next(t, 5*time.Second)
	if d.esmClass&0x04 == 0 {
		t.Errorf("deliver_sm esm_class 0x%02X, want a receipt (0x04)", d.esmClass)
	}
	if !d.hasTLV || d.receiptedID != id {
		t.Errorf("receipt: receipted_message_id %q (present %v), want %q", d.receiptedID, d.hasTLV, id)
	}
	if !strings.HasPrefix(d.text, "id:"+id+" ") || !strings.Contains(d.text, "stat:DELIVRD") {
		t.Errorf("receipt text %q, want id:%s … stat:DELIVRD", d.text, id)
	}
	// fiorix acknowledged it (deliver_sm_resp status 0): the simulator
	// counts it accepted.
	if !testkit.Poll(2*time.Second, func() bool { _, ok := smsc.Receipts(); return ok >= 1 }) {
		t.Error("the simulator never saw its receipt accepted")
	}

	// query_sm with the id the client was given: forwarded to the
	// simulator, which answers ENROUTE; fiorix decodes the proxy's
	// query_sm_resp.
	qr, err := tc.QuerySM("SHOP", id, 0, 0)
	if err != nil {
		t.Errorf("query_sm: %v", err)
	} else if qr.MsgState != "ENROUTE" {
		t.Errorf("query_sm: state %q, want ENROUTE", qr.MsgState)
	}
	if q := smsc.Queried(); len(q) != 1 || q[0] != id {
		t.Errorf("the simulator was queried for %v, want [%s]", q, id)
	}

	select {
	case extra := <-sink.ch:
		t.Errorf("a second deliver_sm reached the client: %+v", extra)
	case <-time.After(100 * time.Millisecond):
	}
}

// A fiorix long message: SubmitLongMsg splits it with a UDH (IEI 0x08, a
// random 16-bit reference renewed on every call) and puts the same key TLV
// on every part. The proxy keeps one record per segment, so the parts get
// their own ids, and a retry (new reference) replays all of them.
func TestFiorixLongMessageSegments(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	tc := dialFiorix(t, app.Addr(), nil)

	text := pdutext.Raw(bytes.Repeat([]byte("0123456789"), 30)) // 300 octets: 3 parts of 133
	msg := func() *fsmpp.ShortMessage {
		m := keyed("invoice-7", text)
		m.Register = 0
		return m
	}
	first, err := tc.SubmitLongMsg(msg())
	if err != nil {
		t.Fatalf("long message: %v", err)
	}
	if len(first) != 3 {
		t.Fatalf("long message: %d parts, want 3", len(first))
	}
	ids := map[string]bool{}
	for i := range first {
		ids[first[i].RespID()] = true
	}
	if len(ids) != 3 {
		t.Fatalf("the 3 parts got ids %v, want 3 distinct", ids)
	}
	retry, err := tc.SubmitLongMsg(msg())
	if err != nil {
		t.Fatalf("retry of the long message: %v", err)
	}
	for i := range retry {
		if got, want := retry[i].RespID(), first[i].RespID(); got != want {
			t.Errorf("retry part %d got %q, want %q", i+1, got, want)
		}
	}
	if n := smsc.Total(); n != 3 {
		t.Errorf("the simulator received %d submit_sm, want 3 (one per part)", n)
	}
}

// message_id: proxy with a fiorix client: the client gets the proxy's
// ids, a receipt built by another implementation (fiorix smpptest) is
// rewritten to them — in the TLV and in the text, so the short_message
// changes length — and still decodes in fiorix; retries replay the proxy
// id.
func TestFiorixClientGetsProxyIDsAndReceiptsRewrittenToThem(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{receipts: true})
	cfg := testConfig(t, smsc.Addr())
	cfg.Accounts[0].MessageID = config.MessageIDProxy
	app := startProxy(t, cfg)
	sink := newReceiptSink()
	tc := dialFiorix(t, app.Addr(), sink)

	sm, err := tc.Submit(keyed("pid-1", pdutext.Raw("hello")))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	id := sm.RespID()
	if id == "" || id == "F1" {
		t.Fatalf("message_id %q: want a proxy-issued id, not the SMSC's F1", id)
	}
	if sm2, err := tc.Submit(keyed("pid-1", pdutext.Raw("hello"))); err != nil || sm2.RespID() != id {
		t.Errorf("retry: %v, id %q; want %q", err, sm2.RespID(), id)
	}
	d := sink.next(t, 5*time.Second)
	if d.receiptedID != id || !strings.HasPrefix(d.text, "id:"+id+" ") || !strings.Contains(d.text, "stat:DELIVRD") {
		t.Errorf("receipt: receipted_message_id %q, text %q; want %q in both", d.receiptedID, d.text, id)
	}
	if n := len(smsc.Submits()); n != 1 {
		t.Errorf("smpptest received %d submit_sm, want 1", n)
	}
}

// Key TLVs the proxy must refuse with ESME_RINVTLVVAL (0xC4), as fiorix
// encodes them: empty, only a NUL (empty once trimmed), 256 octets.
// Nothing is forwarded.
func TestFiorixInvalidKeys(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	tc := dialFiorix(t, app.Addr(), nil)
	for name, key := range map[string]any{
		"empty":      pdutlv.String(""),
		"only a NUL": pdutlv.CString(""),
		"256 octets": strings.Repeat("k", 256),
	} {
		_, err := tc.Submit(keyed(key, pdutext.Raw("x")))
		wantStatus(t, err, 0xC4, name+" key")
	}
	// 255 octets is the longest valid key.
	if _, err := tc.Submit(keyed(strings.Repeat("k", 255), pdutext.Raw("x"))); err != nil {
		t.Errorf("255-octet key: %v", err)
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("the simulator received %d submit_sm, want 1 (the valid key)", n)
	}
}
