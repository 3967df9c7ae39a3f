package interop

import (
	"context"
	"errors"
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/session"
)

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
