package interop

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/session"
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

// A client library that can set only the standard user_message_reference
// (fiorix go-smpp here, as Kannel, jSMPP, smpplib and node smpp can) gets
// exactly-once under idempotency.key: reference: its retry with the same
// reference and text is replayed, another reference or other text under a
// wrapped reference is a new message.
func TestFiorixUserMessageReferenceAsTheKey(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	cfg := testConfig(t, smsc.Addr())
	cfg.Accounts[0].Idempotency.Key = config.KeyReference
	cfg.Accounts[0].Idempotency.FingerprintWindow = config.Duration(time.Minute)
	app := startProxy(t, cfg)
	tc := dialFiorix(t, app.Addr(), nil)
	send := func(ref byte, text string) string {
		t.Helper()
		sm := &fsmpp.ShortMessage{Src: "SHOP", Dst: "447700900123", Text: pdutext.Raw(text),
			TLVFields: pdutlv.Fields{pdutlv.TagUserMessageReference: []byte{0x00, ref}}}
		got, err := tc.Submit(sm)
		if err != nil {
			t.Fatalf("submit ref %d %q: %v", ref, text, err)
		}
		return got.RespID()
	}
	first := send(7, "your code is 1234")
	if again := send(7, "your code is 1234"); again != first {
		t.Errorf("retry with the same reference and text got id %q, want %q", again, first)
	}
	smsc.wantSubmits(t, 1)
	send(8, "your code is 1234")
	send(7, "your code is 9876")
	subs := smsc.wantSubmits(t, 3)
	if ref := subs[2].tlvs[pdutlv.TagUserMessageReference]; len(ref) != 2 || ref[1] != 7 {
		t.Errorf("user_message_reference at the SMSC = % X, want 00 07 (forwarded as sent)", ref)
	}
}

// A fiorix bind with a wrong password is refused with ESME_RBINDFAIL,
// which fiorix reports as BindFailed carrying the pdu.Status.
func TestFiorixBindRefused(t *testing.T) {
	_, app := startSimProxy(t, sim.Config{})
	tc := &fsmpp.Transceiver{Addr: app.Addr(), User: "shop", Passwd: "wrong", BindInterval: time.Minute}
	status := tc.Bind()
	defer func() { _ = tc.Close() }()
	select {
	case st := <-status:
		var code pdu.Status
		if st.Status() != fsmpp.BindFailed || !errors.As(st.Error(), &code) || code != 0x0D {
			t.Errorf("bind with a wrong password: %v (%v), want BindFailed with status 0x0D", st.Status(), st.Error())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no bind status within 5s")
	}
}

// fiorix binding as a separate transmitter and receiver: the proxy sees a
// TX and an RX session; the receipt of a message submitted on the TX goes
// to the RX; unbind from either closes promptly.
func TestFiorixTransmitterAndReceiver(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{DLRDelay: 20 * time.Millisecond})

	sink := newReceiptSink()
	rx := &fsmpp.Receiver{Addr: app.Addr(), User: "shop", Passwd: "secret", BindInterval: time.Minute, Handler: sink.handle}
	rxStatus := rx.Bind()
	t.Cleanup(func() { _ = rx.Close() })
	tx := &fsmpp.Transmitter{Addr: app.Addr(), User: "shop", Passwd: "secret", BindInterval: time.Minute, RespTimeout: 5 * time.Second}
	txStatus := tx.Bind()
	t.Cleanup(func() { _ = tx.Close() })
	for name, ch := range map[string]<-chan fsmpp.ConnStatus{"receiver": rxStatus, "transmitter": txStatus} {
		select {
		case st := <-ch:
			if st.Status() != fsmpp.Connected {
				t.Fatalf("fiorix %s bind: %v (%v)", name, st.Status(), st.Error())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fiorix %s bind: no status within 5s", name)
		}
	}
	binds := map[string]int{}
	for _, s := range app.Sessions.List() {
		if s.Side == session.SideESME {
			binds[s.Bind]++
		}
	}
	if binds[session.BindTX] != 1 || binds[session.BindRX] != 1 || len(binds) != 2 {
		t.Errorf("the proxy lists ESME sessions %v, want one TX and one RX", binds)
	}

	sm, err := tx.Submit(keyed("rx-1", pdutext.Latin1("café")))
	if err != nil {
		t.Fatalf("submit on the transmitter: %v", err)
	}
	id := sm.RespID()
	if sm2, err := tx.Submit(keyed("rx-1", pdutext.Latin1("café"))); err != nil || sm2.RespID() != id {
		t.Errorf("retry: %v, id %q; want %q", err, sm2.RespID(), id)
	}
	if d := sink.next(t, 5*time.Second); d.receiptedID != id {
		t.Errorf("the receiver got a receipt for %q, want %q", d.receiptedID, id)
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("the simulator received %d submit_sm, want 1", n)
	}

	// fiorix's Close sends unbind and waits up to 1s for the connection to
	// end: the proxy answers unbind_resp and closes it at once.
	start := time.Now()
	_ = tx.Close()
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("fiorix Close took %v: the proxy did not close the connection after unbind_resp", d)
	}
	if !testkit.Poll(2*time.Second, func() bool {
		for _, s := range app.Sessions.List() {
			if s.Side == session.SideESME && s.Bind == session.BindTX {
				return false
			}
		}
		return true
	}) {
		t.Error("the TX session is still listed after unbind")
	}
}

// The proxy's ESME-side keep-alive with a fiorix client (whose own
// enquire_link period is at least 10s, so it sends none here): the proxy
// sends enquire_link after 100ms without traffic, fiorix answers it, and
// the session outlives the 3×enquire_link idle limit several times over.
func TestFiorixAnswersProxyEnquireLink(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	cfg := testConfig(t, smsc.Addr())
	cfg.Listen.EnquireLink = config.Duration(100 * time.Millisecond)
	app := startProxy(t, cfg)
	tc := &fsmpp.Transceiver{Addr: app.Addr(), User: "shop", Passwd: "secret", RespTimeout: 5 * time.Second, BindInterval: time.Minute}
	status := tc.Bind()
	t.Cleanup(func() { _ = tc.Close() })
	if st := <-status; st.Status() != fsmpp.Connected {
		t.Fatalf("fiorix bind: %v (%v)", st.Status(), st.Error())
	}
	select {
	case st := <-status:
		t.Fatalf("the fiorix session changed to %v (%v) while idle: enquire_link not answered or not honoured", st.Status(), st.Error())
	case <-time.After(time.Second):
	}
	if _, err := tc.Submit(keyed("idle-1", pdutext.Raw("still here"))); err != nil {
		t.Errorf("submit after 1s idle: %v", err)
	}
}

// Graceful shutdown with a fiorix client that has a submit in flight: the
// submit is answered (with the id), then the proxy sends unbind, which
// fiorix never answers; the proxy closes the session after its grace and
// Shutdown returns well within shutdown_timeout.
func TestFiorixGracefulShutdown(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Delay: 300 * time.Millisecond} }})
	sink := newReceiptSink()
	// BindInterval: no reconnection (and no fiorix-internal data race on
	// it) before the test closes the client.
	tc := &fsmpp.Transceiver{Addr: app.Addr(), User: "shop", Passwd: "secret", RespTimeout: 5 * time.Second, BindInterval: time.Minute, Handler: sink.handle}
	status := tc.Bind()
	t.Cleanup(func() { _ = tc.Close() })
	if st := <-status; st.Status() != fsmpp.Connected {
		t.Fatalf("fiorix bind: %v (%v)", st.Status(), st.Error())
	}
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		sm, err := tc.Submit(keyed("drain-1", pdutext.Raw("in flight at shutdown")))
		r := result{err: err}
		if sm != nil {
			r.id = sm.RespID()
		}
		done <- r
	}()
	if !testkit.Poll(2*time.Second, func() bool { return smsc.Total() == 1 }) {
		t.Fatal("the submit never reached the simulator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := app.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	took := time.Since(start)
	r := <-done
	if r.err != nil || r.id == "" {
		t.Errorf("the submit in flight at shutdown: %v, id %q; want answered with an id", r.err, r.id)
	}
	if sink.unbinds.Load() != 1 {
		t.Errorf("fiorix saw %d unbind from the proxy, want 1", sink.unbinds.Load())
	}
	if took > 3*time.Second {
		t.Errorf("Shutdown took %v with a client that never answers unbind", took)
	}
	select {
	case st := <-status:
		if st.Status() != fsmpp.Disconnected {
			t.Errorf("fiorix status after shutdown %v, want Disconnected", st.Status())
		}
	case <-time.After(2 * time.Second):
		t.Error("fiorix never saw the connection end")
	}
}
