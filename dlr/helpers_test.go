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

func mustParse(t *testing.T, frame []byte) *message {
	t.Helper()
	m, err := parseMessage(frame)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// acceptAll answers every submit with status 0 and id.
type acceptAll struct{ id string }

func (f acceptAll) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	_ = a.Journal("smsc", "smsc/1", 1)
	return dedup.Result{Kind: dedup.Answered, Status: smpp.StatusOK, MessageID: f.id, Upstream: "smsc", Session: "smsc/1", Sequence: 1}
}

func keyedSubmit(t *testing.T, key, dst string) *smpp.Submit {
	t.Helper()
	f := smpptest.SubmitFields{Src: "SHOP", Dst: dst, RegisteredDelivery: 1, ShortMessage: []byte("hello")}
	if key != "" {
		f.TLVs = []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)}}
	}
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, f))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func queued(t *testing.T, st state.Queue, q string) []*state.QueueEntry {
	t.Helper()
	es, err := st.List(bg, q, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// ackFailingQueue is the store's queue whose Acks are refused while fail
// is set; refused counts them.
// ackRefusedOnDelivery queues one receipt for shop, makes the store refuse
// Acks, binds an ESME and kicks the delivery.
func ackRefusedOnDelivery(t *testing.T) (*env, *ackFailingQueue, *fakeRx) {
	t.Helper()
	fq := &ackFailingQueue{}
	e := newEnv(t, fq.wrap)
	e.accepted(t, "shop", "k1", "3e8")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != 0 {
		t.Fatal(st)
	}
	fq.fail.Store(true)
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	return e, fq, rx
}

type ackFailingQueue struct {
	state.Queue
	fail    atomic.Bool
	refused atomic.Int32
}

// wrap puts the queue in front of the Config's store.
func (q *ackFailingQueue) wrap(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q }

func (q *ackFailingQueue) Ack(ctx context.Context, queue string, seq uint64) error {
	if q.fail.Load() {
		q.refused.Add(1)
		return errors.New("disk full")
	}
	return q.Queue.Ack(ctx, queue, seq)
}

// receiptFrame is a deliver_sm receipt for id with the given TLVs.
func receiptFrame(text string, tlvs ...smpp.TLV) []byte {
	f := smpptest.SubmitFields{Src: "447700900123", Dst: "SHOP", EsmClass: 0x04, ShortMessage: []byte(text), TLVs: tlvs}
	b := smpptest.EncodeSubmit(7, f)
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 7})
	return b
}

// queueReceipts stores n accepted records of shop and queues a receipt for
// each; it returns the ids delivered to shop, in queue order.
func queueReceipts(t *testing.T, e *env, n int) []string {
	t.Helper()
	var want []string
	for i := range n {
		id := fmt.Sprintf("%x", 100+i)
		e.accepted(t, "shop", fmt.Sprint("k", i), id)
		if st := e.deliver(t, dlrFrame(fmt.Sprint(100+i), "DELIVRD")); st != 0 {
			t.Fatal(st)
		}
		want = append(want, id)
	}
	return want
}

func queueEmpty(e *env) func() bool {
	return func() bool { es, _ := e.st.List(bg, accountQueue("shop"), 0, 100); return len(es) == 0 }
}

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
	// nack answers the n-th deliver_sm with a generic_nack (of status 0)
	// instead of its response when it returns true.
	nack func(n int) bool

	calls    atomic.Int32 // Send calls so far
	sending  atomic.Int32 // Send calls in progress
	overlap  atomic.Bool  // two Send calls were in progress at once
	awaiting atomic.Int32 // deliver_sm queued, answer not yet given
	peak     atomic.Int32 // most deliver_sm awaiting their answer at once

	mu  sync.Mutex
	got []string // receipt ids (or MO text) in arrival order
}

func (f *fakeRx) ID() string { return f.id }

func (f *fakeRx) BoundAt() time.Time { return f.bound }

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
	if f.nack != nil && f.nack(n) {
		frame = smpp.GenericNack(st, 1)
	}
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
	waitFor(t, "every kept receipt tried", func() bool { return e.triedAfter(after) })
}

// triedAfter reports whether smsc keeps receipts and the reconciler has
// tried each at a time not before after (see waitTried).
func (e *env) triedAfter(after time.Time) bool {
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
}

// fwd answers every submit ambiguously: the record becomes unknown.
type fwd struct{}

func (fwd) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	_ = a.Journal("smsc", "smsc/1", 1)
	return dedup.Result{Kind: dedup.Ambiguous, Upstream: "smsc", Err: errors.New("timeout")}
}

// newClock is a hand-moved clock standing at the time it is made.
func newClock() *testkit.Clock { return testkit.NewClock(time.Now()) }
