package dlr

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

func TestReceiptMatchedRewrittenDeliveredOnce(t *testing.T) {
	e := newEnv(t, nil)
	rec := e.accepted(t, "shop", "k1", "3e8")
	bank := e.accepted(t, "bank", "k2", "3e9")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v, want 0", st)
	}
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver of the same receipt again = %v, want 0", st)
	}
	e.deliver(t, dlrFrame("1001", "DELIVRD"))
	if got := e.svc.Count(OutDuplicate); got != 1 {
		t.Errorf("Count(duplicate) = %d, want 1", got)
	}
	shop, other := &fakeRx{id: "s1"}, &fakeRx{id: "b1"}
	e.rcv.bind("shop", shop)
	e.rcv.bind("bank", other)
	e.svc.kick("shop")
	e.svc.kick("bank")
	waitFor(t, "receipts delivered", func() bool { return len(shop.received()) == 1 && len(other.received()) == 1 })
	if got := shop.received(); got[0] != rec.MessageID {
		t.Errorf("shop got receipt id %q, want its submit_sm_resp id %q", got[0], rec.MessageID)
	}
	if got := other.received(); got[0] != bank.ProxyID {
		t.Errorf("bank got receipt id %q, want its proxy id %q", got[0], bank.ProxyID)
	}
	waitFor(t, "queue empty", func() bool { es, _ := e.st.List(bg, accountQueue("shop"), 0, 10); return len(es) == 0 })
	got, _ := e.st.Get(bg, rec.Key)
	if got.Delivery != state.DeliveryDelivered || got.DeliveryAt.IsZero() || got.State != state.Accepted {
		t.Errorf("record after the receipt: state %s delivery %q at %v; want accepted, delivered, a time", got.State, got.Delivery, got.DeliveryAt)
	}
	if n := len(shop.received()); n != 1 { // deleted from the queue: none can follow
		t.Errorf("shop got %d deliver_sm, want 1", n)
	}
}

// A late intermediate receipt does not overwrite a final state.
func TestDeliveryStateKeepsFinal(t *testing.T) {
	e := newEnv(t, nil)
	rec := e.accepted(t, "shop", "k1", "a")
	e.deliver(t, dlrFrame("10", "UNDELIV"))
	e.deliver(t, dlrFrame("10", "ENROUTE"))
	got, _ := e.st.Get(bg, rec.Key)
	if got.Delivery != state.DeliveryUndeliverable {
		t.Errorf("delivery = %q, want undeliverable", got.Delivery)
	}
	if es, _ := e.st.List(bg, accountQueue("shop"), 0, 10); len(es) != 2 {
		t.Errorf("queued %d receipts, want both (intermediate receipts are forwarded)", len(es))
	}
}

// In order, windowed, round-robin; a refused or unanswered deliver_sm is
// sent again; nothing is acknowledged twice.
func TestDispatcherRedelivers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DeliverWindow = 2 })
	for i := range 20 {
		e.accepted(t, "shop", fmt.Sprint("k", i), fmt.Sprintf("%x", 100+i))
		if st := e.deliver(t, dlrFrame(fmt.Sprint(100+i), "DELIVRD")); st != 0 {
			t.Fatal(st)
		}
	}
	flaky := &fakeRx{id: "a", answer: func(n int) (smpp.Status, error) {
		switch n {
		case 1:
			return smpp.StatusThrottled, nil
		case 2:
			return 0, errors.New("no answer")
		}
		return 0, nil
	}}
	steady := &fakeRx{id: "b"}
	e.rcv.bind("shop", flaky, steady)
	e.svc.kick("shop")
	waitFor(t, "all acknowledged", func() bool { es, _ := e.st.List(bg, accountQueue("shop"), 0, 100); return len(es) == 0 })
	total := len(flaky.received()) + len(steady.received())
	if total != 22 || len(flaky.received()) < 3 || len(steady.received()) < 3 {
		t.Errorf("deliveries: %d on a, %d on b; want 22 in all (20 + a refusal + a timeout) spread over both", len(flaky.received()), len(steady.received()))
	}
	if got := e.svc.Count(DelAcked); got != 20 {
		t.Errorf("Count(acked) = %d, want 20", got)
	}
}

// An unmatched receipt is kept and delivered once its record has an id.
func TestUnmatchedMatchedLater(t *testing.T) {
	e := newEnv(t, nil)
	e.deliver(t, dlrFrame("255", "DELIVRD"))
	e.deliver(t, dlrFrame("255", "DELIVRD"))
	if e.svc.Count(OutUnmatched) != 1 || e.svc.Count(OutDuplicate) != 1 {
		t.Errorf("unmatched %d, duplicate %d; want 1, 1", e.svc.Count(OutUnmatched), e.svc.Count(OutDuplicate))
	}
	list, err := e.svc.Unmatched(bg, "", 10)
	if err != nil || len(list) != 1 || list[0].MessageID != "255" || list[0].Stat != "DELIVRD" {
		t.Errorf("Unmatched() = %+v, %v; want the kept receipt", list, err)
	}
	rx := &fakeRx{id: "s"}
	e.rcv.bind("shop", rx)
	e.accepted(t, "shop", "late", "ff")
	waitFor(t, "kept receipt delivered", func() bool { return len(rx.received()) == 1 })
	if got := rx.received()[0]; got != "ff" {
		t.Errorf("delivered id %q, want ff", got)
	}
	waitFor(t, "unmatched queue empty", func() bool { l, _ := e.svc.Unmatched(bg, "smsc", 10); return len(l) == 0 })
	// The receipt is counted just after it leaves the unmatched list.
	waitFor(t, "matched_later counted", func() bool { return e.svc.Count(OutMatchedLater) >= 1 })
	if got := e.svc.Count(OutMatchedLater); got != 1 {
		t.Errorf("Count(matched_later) = %d, want 1", got)
	}
}

// SPEC §5: a kept receipt that matches exactly one unknown record of its
// upstream by addresses and time resolves it; two candidates resolve
// nothing.
func TestReconcileUnknown(t *testing.T) {
	clk := newClock()
	var eng *dedup.Engine
	e := newEnv(t, func(c *Config) { c.Now = clk.Now }, resolving(fwd{}, &eng))
	sub := func(key, dst string) *smpp.Submit {
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, smpptest.SubmitFields{Src: "SHOP", Dst: dst, RegisteredDelivery: 1, ShortMessage: []byte("hi " + key),
			TLVs: []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)}}}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := eng.Submit(bg, "shop", dedup.Policy{}, sub("one", "447700900123"))
	eng.Submit(bg, "shop", dedup.Policy{}, sub("two", "447700900555"))
	eng.Submit(bg, "shop", dedup.Policy{}, sub("three", "447700900555"))
	if a.Outcome != dedup.OutUnknown {
		t.Fatalf("submit = %+v, want unknown", a)
	}
	e.deliver(t, dlrFrame("4096", "DELIVRD")) // from 447700900123: one candidate
	other := receiptFrame("id:4097 stat:DELIVRD")
	other = append([]byte(nil), other...)
	m, _ := parseMessage(other)
	copy(m.src, "447700900555") // same length: two candidates
	e.deliver(t, other)
	clk.Advance(settleMargin + time.Second) // past the settle delay, on the injected clock

	waitFor(t, "record resolved", func() bool { r, _ := e.st.Get(bg, a.Key); return r.State == state.Accepted })
	r, _ := e.st.Get(bg, a.Key)
	if r.MessageID != "1000" {
		t.Errorf("resolved message id %q, want 1000 (4096 in smsc's hex response format)", r.MessageID)
	}
	retry := eng.Submit(bg, "shop", dedup.Policy{}, sub("one", "447700900123"))
	if retry.Status != 0 || retry.MessageID != "1000" {
		t.Errorf("retry after the receipt = %+v, want status 0 with 1000", retry)
	}
	e.waitTried(t, clk.Now()) // 4097 tried past its settle delay
	if l, _ := e.svc.Unmatched(bg, "smsc", 10); len(l) != 1 || l[0].MessageID != "4097" {
		t.Errorf("unmatched = %+v; want the ambiguous receipt 4097 still kept", l)
	}
}

func TestMORouting(t *testing.T) {
	mo := func(dst string) []byte {
		b := smpptest.EncodeSubmit(1, smpptest.SubmitFields{Src: "447700900123", Dst: dst, ShortMessage: []byte("STOP")})
		smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 1})
		return b
	}
	routes := []MORoute{{Prefix: "4477", Account: "shop"}, {Prefix: "44779", Account: "bank"}}
	tests := []struct {
		dst, def, want string
	}{
		{"447712345", "", "shop"},
		{"447798765", "", "bank"}, // longest prefix
		{"33612345", "bank", "bank"},
		{"33612345", "", ""},
	}
	for _, tc := range tests {
		e := newEnv(t, func(c *Config) { c.MORoutes, c.DefaultAccount = routes, tc.def })
		st := e.deliver(t, mo(tc.dst))
		if tc.want == "" {
			if st != smpp.StatusInvDstAdr {
				t.Errorf("MO to %s without a route = %v, want ESME_RINVDSTADR", tc.dst, st)
			}
			continue
		}
		es, _ := e.st.List(bg, accountQueue(tc.want), 0, 10)
		if st != 0 || len(es) != 1 || es[0].Kind != KindMO || string(es[0].Body) != string(mo(tc.dst)[smpp.HeaderLen:]) {
			t.Errorf("MO to %s (default %q) = %v, queue %s %+v; want it queued as received", tc.dst, tc.def, st, tc.want, es)
		}
	}
}

func TestStoreFailureRefusesUpstream(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "shop", "k", "1")
	e.st.FailWrites(errors.New("disk full"))
	if st := e.deliver(t, dlrFrame("1", "DELIVRD")); st != smpp.StatusSysErr {
		t.Errorf("OnDeliver with a failing store = %v, want ESME_RSYSERR (the upstream sends it again)", st)
	}
	e.st.FailWrites(nil)
	if st := e.deliver(t, dlrFrame("1", "DELIVRD")); st != 0 {
		t.Errorf("OnDeliver after the store recovered = %v, want 0", st)
	}
	if st := e.deliver(t, []byte{0, 0, 0, 20, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1, 9, 9, 9, 9}); st == 0 {
		t.Errorf("OnDeliver of a malformed deliver_sm = 0, want an error status")
	}
}
