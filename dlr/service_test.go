package dlr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

var bg = context.Background()

// fakeRx is a receiving ESME session: it records what it gets and answers
// with answer (nil: status 0; an error: it never answers). Closing done
// ends the session: Send fails and fakeRcv no longer lists it.
type fakeRx struct {
	id     string
	bound  time.Time
	answer func(n int) (smpp.Status, error)
	done   chan struct{} // nil: never ends
	// queueDelay is how long the call-th Send takes to queue its
	// deliver_sm (a session waiting for room; it gives up when ctx ends);
	// respDelay how long the answer to the n-th deliver_sm takes to come.
	queueDelay func(call int) time.Duration
	respDelay  func(n int) time.Duration

	calls    atomic.Int32 // Send calls so far
	sending  atomic.Int32 // Send calls in progress
	overlap  atomic.Bool  // two Send calls were in progress at once
	awaiting atomic.Int32 // deliver_sm queued, answer not yet given
	peak     atomic.Int32 // most deliver_sm awaiting their answer at once

	mu  sync.Mutex
	got []string // receipt ids (or MO text) in arrival order
}

func (f *fakeRx) ID() string            { return f.id }
func (f *fakeRx) BoundAt() time.Time    { return f.bound }
func (f *fakeRx) Done() <-chan struct{} { return f.done }

func (f *fakeRx) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *fakeRx) Send(ctx context.Context, id uint32, body []byte) (<-chan []byte, func(), error) {
	if f.sending.Add(1) > 1 {
		f.overlap.Store(true)
	}
	defer f.sending.Add(-1)
	if f.ended() {
		return nil, nil, smppserver.ErrSessionClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	m, err := parseMessage(smpp.EncodeSimple(id, 0, 1, body))
	if err != nil {
		return nil, nil, err
	}
	what := string(m.userData())
	if m.isReceipt() {
		what = readReceipt(m).id
	}
	call := int(f.calls.Add(1))
	if f.queueDelay != nil {
		t := time.NewTimer(f.queueDelay(call))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		}
	}
	f.mu.Lock()
	f.got = append(f.got, what)
	n := len(f.got)
	f.mu.Unlock()
	st := smpp.StatusOK
	if f.answer != nil {
		if st, err = f.answer(n); err != nil {
			return make(chan []byte), func() {}, nil // never answered
		}
	}
	resp := make(chan []byte, 1)
	frame := smpp.EncodeSimple(id|smpp.RespBit, st, 1, []byte{0})
	if f.respDelay == nil {
		resp <- frame
	} else {
		if a := f.awaiting.Add(1); a > f.peak.Load() {
			f.peak.Store(a) // only Send writes peak, one call at a time
		}
		time.AfterFunc(f.respDelay(n), func() {
			f.awaiting.Add(-1)
			resp <- frame
		})
	}
	return resp, func() {}, nil
}

func (f *fakeRx) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

type fakeRcv struct {
	mu sync.Mutex
	m  map[string][]Receiver
}

func (f *fakeRcv) Receivers(account string) []Receiver {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Receiver
	for _, r := range f.m[account] {
		if rx, ok := r.(*fakeRx); ok && rx.ended() {
			continue // as ReceiversOf skips ended sessions
		}
		out = append(out, r)
	}
	return out
}

func (f *fakeRcv) bind(account string, rx ...*fakeRx) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string][]Receiver{}
	}
	f.m[account] = nil
	for _, r := range rx {
		f.m[account] = append(f.m[account], r)
	}
}

// testIDs reads smsc's ids as hex in its submit_sm_resp and decimal in
// its receipts; bank is given proxy ids.
var testIDs = func() *msgid.IDs {
	ids, err := msgid.New(map[string]msgid.Upstream{"smsc": {RespIDFormat: msgid.Hex, ReceiptIDFormat: msgid.Dec}},
		map[string]msgid.ProxyIDStyle{"bank": {}})
	if err != nil {
		panic(err)
	}
	return ids
}()

type env struct {
	svc *Service
	st  *storetest.Faulty // fault injection over a MemStore
	rcv *fakeRcv
}

func newEnv(t *testing.T, mods ...func(*Config)) *env {
	t.Helper()
	st := storetest.NewFaulty(state.NewMem(nil))
	rcv := &fakeRcv{}
	cfg := Config{
		Store: st,
		IDs:   testIDs,
		Accounts: map[string]Account{
			"shop": {Redelivery: 200 * time.Millisecond, Route: []string{"smsc"}},
			"bank": {Redelivery: 200 * time.Millisecond, Route: []string{"smsc"}},
		},
		Upstreams:  map[string]Upstream{"smsc": {}},
		BindSettle: time.Millisecond,
		Receivers:  rcv,
	}
	for _, mod := range mods {
		if mod != nil {
			mod(&cfg)
		}
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{svc: svc, st: st, rcv: rcv}
	svc.Start()
	t.Cleanup(svc.Close)
	return e
}

// resolving makes the service settle unknown records through a dedup
// engine on its store that forwards with f, as the proxy wires it; *eng is
// set to the engine.
func resolving(f dedup.Forwarder, eng **dedup.Engine) func(*Config) {
	return func(c *Config) {
		*eng = dedup.New(dedup.Config{Store: c.Store, Forwarder: f, IDs: testIDs, Now: c.Now})
		c.Resolver = *eng
		c.NotUnknown = func(err error) bool { return errors.Is(err, dedup.ErrNotUnknown) }
		c.Keys = Keys{OfTLV: dedup.KeyOfTLV, FromTLV: func(k string) bool { return strings.HasPrefix(k, dedup.KeyOfTLV(nil)) }}
	}
}

// accepted stores an accepted record of account whose upstream id is id
// (hex, as smsc answers), as the engine would.
func (e *env) accepted(t *testing.T, account, key, id string) *state.Record {
	t.Helper()
	now := time.Now()
	r := &state.Record{
		Key: state.Key{Account: account, Key: key}, State: state.Accepted, Upstream: "smsc",
		MessageID: id, NormID: testIDs.NormalizeID("smsc", id), ProxyID: testIDs.IssueID(account),
		AddrHash: state.HashAddrs([]byte("SHOP"), []byte("447700900123")),
		Created:  now, Updated: now, Expires: now.Add(time.Hour),
	}
	if _, created, err := e.st.Create(bg, r); err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	return r
}

func (e *env) deliver(t *testing.T, frame []byte) smpp.Status {
	t.Helper()
	return e.svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: frame})
}

// dlrFrame is a DELIVRD receipt from 447700900123 to SHOP naming id in
// the text only (decimal, as smsc writes receipts).
func dlrFrame(id, stat string) []byte {
	return receiptFrame(fmt.Sprintf("id:%s sub:001 dlvrd:001 submit date:%s done date:%s stat:%s err:000 text:",
		id, time.Now().UTC().Format("0601021504"), time.Now().UTC().Format("0601021504"), stat))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, cond, what)
}

// waitTried waits until the reconciler has tried every kept receipt of
// smsc at a time (on the service's clock) not before after: a try at T
// schedules the next one later than T, and a try that was held by the
// settle delay schedules it no later than when that delay ends.
func (e *env) waitTried(t *testing.T, after time.Time) {
	t.Helper()
	waitFor(t, "every kept receipt tried", func() bool {
		kept, err := e.svc.Unmatched(bg, "smsc", 100)
		if err != nil || len(kept) == 0 {
			return false
		}
		c := e.svc.rec
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range kept {
			if r, ok := c.next[k.Seq]; !ok || !r.at.After(after) {
				return false
			}
		}
		return true
	})
}

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

// fwd answers every submit ambiguously: the record becomes unknown.
type fwd struct{}

func (fwd) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	_ = a.Journal("smsc", "smsc/1", 1)
	return dedup.Result{Kind: dedup.Ambiguous, Upstream: "smsc", Err: errors.New("timeout")}
}

// SPEC §5: a kept receipt that matches exactly one unknown record of its
// upstream by addresses and time resolves it; two candidates resolve
// nothing.
func TestReconcileUnknown(t *testing.T) {
	clk := testkit.NewClock(time.Now())
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
