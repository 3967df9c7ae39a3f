package dlr

// Regression tests from review 2 (receipt/MO path): each failed on the
// code as reviewed and states the behaviour SPEC §4/§5 asks for.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// r2clock is a settable clock shared by the store, the engine and the
// service.
type r2clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *r2clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *r2clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// r2accept answers every submit with status 0 and id.
type r2accept struct{ id string }

func (f r2accept) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	_ = a.Journal("smsc", "smsc/1", 1)
	return dedup.Result{Kind: dedup.Answered, Status: smpp.StatusOK, MessageID: f.id, Upstream: "smsc", Session: "smsc/1", Sequence: 1}
}

func r2submit(t *testing.T, key, dst string) *smpp.Submit {
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

// SPEC §4 / §2: under idempotency.key: fingerprint the record must still
// route the receipt. The record expires with fingerprint_window (60s), so a
// DELIVRD that comes two minutes after the submit matches nothing and is
// kept as unmatched until it expires: the ESME never gets it although the
// upstream got deliver_sm_resp 0.
func TestReview2FingerprintRecordStillRoutesLateReceipt(t *testing.T) {
	clk := &r2clock{t: time.Now()}
	st := state.NewMem(clk.now)
	svc, err := New(Config{
		Store:     st,
		Accounts:  map[string]Account{"shop": {Route: []string{"smsc"}}},
		Upstreams: map[string]Upstream{"smsc": {RespIDFormat: Hex, ReceiptIDFormat: Dec}},
		Now:       clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := dedup.New(dedup.Config{Store: st, Forwarder: r2accept{"3e8"}, IDs: svc.IDs(), Now: clk.now})
	svc.Attach(&fakeRcv{}, eng)
	svc.Start()
	t.Cleanup(svc.Close)

	a := eng.Submit(bg, "shop", dedup.Policy{Key: dedup.KeyFingerprint}, r2submit(t, "", "447700900123"))
	if a.Status != smpp.StatusOK || a.MessageID != "3e8" {
		t.Fatalf("submit = %+v, want accepted with 3e8", a)
	}
	clk.add(2 * time.Minute) // a normal receipt delay; fingerprint_window is 60s
	if st := svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: dlrFrame("1000", "DELIVRD")}); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v", st)
	}
	if es := queued(t, st, accountQueue("shop")); len(es) != 1 {
		kept, _ := svc.Unmatched(bg, "smsc", 10)
		t.Fatalf("receipt 2 minutes after a fingerprint-keyed submit: %d queued for shop, %d kept unmatched; want it queued for shop", len(es), len(kept))
	}
}

// SPEC §5 (echo_tlv): two accounts may use the same key; an echoed key
// must resolve only the unknown record it names. The reconciler walks the
// accounts in map order and returns the first record with that key on the
// upstream even when it is an accepted record of another account with
// another message id: the receipt of shop's message goes to bank,
// rewritten to bank's id, and shop's record stays unknown.
func TestReview2EchoTLVDoesNotPickAnotherAccountsRecord(t *testing.T) {
	for i := range 12 {
		e := newEnv(t, func(c *Config) {
			c.Upstreams = map[string]Upstream{"smsc": {RespIDFormat: Hex, ReceiptIDFormat: Dec, EchoTLV: smpp.DefaultIdempotencyTag}}
		})
		eng := dedup.New(dedup.Config{Store: e.st, Forwarder: fwd{}, IDs: e.svc.IDs()})
		e.svc.Attach(e.rcv, eng)
		e.accepted(t, "bank", dedup.KeyOfTLV([]byte("order-1")), "3e9") // bank's own order-1, accepted
		a := eng.Submit(bg, "shop", dedup.Policy{}, r2submit(t, "order-1", "447700900999"))
		if a.Outcome != dedup.OutUnknown {
			t.Fatalf("shop submit = %+v, want unknown", a)
		}
		// shop's message: the upstream names it 4096 and echoes shop's key.
		// (Another destination: the address match cannot settle it.)
		f := receiptFrame("id:4096 sub:001 dlvrd:001 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.DefaultIdempotencyTag, Value: []byte("order-1")})
		if st := e.deliver(t, f); st != 0 {
			t.Fatal(st)
		}
		waitFor(t, "kept receipt settled", func() bool { l, _ := e.svc.Unmatched(bg, "smsc", 10); return len(l) == 0 })
		if es := queued(t, e.st, accountQueue("bank")); len(es) != 0 {
			t.Fatalf("run %d: shop's receipt (echoing shop's key) was queued for bank as %q", i, es[0].MessageID)
		}
		if r, _ := e.st.Get(bg, a.Key); r.State != state.Accepted || r.MessageID != "1000" {
			t.Fatalf("run %d: shop's record %s %q; want accepted with 1000", i, r.State, r.MessageID)
		}
		e.svc.Close()
	}
}

// SPEC §5: an unmatched receipt resolves an unknown record only when that
// record is the only one it can be. A receipt that overtakes its own
// submit_sm_resp (the record is still `sent`) must not resolve another,
// older unknown record with the same addresses: that gives the unknown
// record the other message's id (two records, one id; the retry of a
// message that may never have been sent is answered "accepted").
func TestReview2ReconcileIgnoresUnknownWhileSentRecordHasSameAddresses(t *testing.T) {
	// The second record below stays `sent` for the whole test, as a real
	// one does for up to the upstream's response_timeout.
	e := newEnv(t, func(c *Config) {
		c.Upstreams = map[string]Upstream{"smsc": {RespIDFormat: Hex, ReceiptIDFormat: Dec, ResponseTimeout: 10 * time.Second}}
	})
	eng := dedup.New(dedup.Config{Store: e.st, Forwarder: fwd{}, IDs: e.svc.IDs()})
	e.svc.Attach(e.rcv, eng)
	old := eng.Submit(bg, "shop", dedup.Policy{}, r2submit(t, "otp-1", "447700900123"))
	if old.Outcome != dedup.OutUnknown {
		t.Fatalf("first submit = %+v, want unknown", old)
	}
	// The second OTP to the same number: forwarded, response not back yet.
	now := time.Now()
	second := &state.Record{
		Key: state.Key{Account: "shop", Key: dedup.KeyOfTLV([]byte("otp-2"))}, State: state.Sent, Upstream: "smsc",
		Session: "smsc/1", Sequence: 2, AddrHash: state.HashAddrs([]byte("SHOP"), []byte("447700900123")),
		Created: now, Updated: now, Expires: now.Add(time.Hour),
	}
	if _, ok, err := e.st.Create(bg, second); err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Its receipt overtakes its submit_sm_resp.
	if st := e.deliver(t, dlrFrame("4096", "ACCEPTD")); st != 0 {
		t.Fatal(st)
	}
	time.Sleep(time.Second)
	if r, _ := e.st.Get(bg, old.Key); r.State != state.Unknown {
		t.Fatalf("the older unknown record became %s with id %q from the receipt of a message still `sent`; want it left unknown", r.State, r.MessageID)
	}
}

// SPEC §4: delivery is at-least-once *until* a deliver_sm_resp 0. When the
// store refuses the Ack (disk full), the dispatcher forgets that the ESME
// acknowledged and sends the same entry again at once, in a tight loop,
// for as long as the store refuses writes.
func TestReview2AckFailureDoesNotResendAcknowledgedReceipt(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "shop", "k1", "3e8")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != 0 {
		t.Fatal(st)
	}
	e.st.FailWrites(errors.New("disk full"))
	t.Cleanup(func() { e.st.FailWrites(nil) })
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	time.Sleep(600 * time.Millisecond)
	if n := len(rx.received()); n != 1 {
		t.Fatalf("one receipt, acknowledged with status 0 every time: delivered %d times in 600ms; want 1", n)
	}
}

// The reconciler's per-entry schedule (next/nextUp) is pruned only by a
// pass that starts at the head and reaches the end; with 5000 or more kept
// receipts no pass does, so the schedules of expired or settled entries
// are never forgotten: memory grows with every unmatched receipt ever seen.
func TestReview2ReconcilerForgetsScheduleOfExpiredEntries(t *testing.T) {
	clk := &r2clock{t: time.Now()}
	st := state.NewMem(clk.now)
	svc, err := New(Config{Store: st, Accounts: map[string]Account{"shop": {}}, Upstreams: map[string]Upstream{"smsc": {}}, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	t.Cleanup(svc.Close)
	body := dlrFrame("1", "DELIVRD")[smpp.HeaderLen:]
	put := func(n int, ttl time.Duration) {
		for range n {
			e := &state.QueueEntry{Queue: unmatchedQueue("smsc"), Kind: KindUnmatched, Upstream: "smsc", MessageID: "1",
				Command: smpp.CmdDeliverSM, Body: body, Enqueued: clk.now(), Expires: clk.now().Add(ttl)}
			if _, _, err := st.Enqueue(bg, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(6000, time.Hour)   // expire first
	put(6000, 3*time.Hour) // still kept after that
	svc.rec.note("smsc")
	sched := func() int { svc.rec.mu.Lock(); defer svc.rec.mu.Unlock(); return len(svc.rec.next) }
	deadline := time.Now().Add(10 * time.Second)
	for sched() < 12000 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 12000 kept receipts tried within 10s", sched())
		}
		time.Sleep(20 * time.Millisecond)
	}
	clk.add(90 * time.Minute) // the first 6000 expire
	deadline = time.Now().Add(5 * time.Second)
	for sched() > 6000 {
		if time.Now().After(deadline) {
			t.Fatalf("reconciler still holds %d schedules for 6000 kept receipts (expired ones never forgotten)", sched())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SPEC §4: "matched by receipted_message_id TLV, else by the id: field".
// An SMSC that answers in hex and writes receipt texts in decimal commonly
// puts the TLV in its submit_sm_resp form (SMPP v3.4: "SMSC message ID of
// receipted message"), as in this package's own receipt fixture. The TLV
// is read only in receipt_id_format, and the text id is never tried once a
// TLV is present: (1) the receipt matches nothing and is kept until it
// expires; (2) a digits-only hex TLV is read as decimal and matches another
// record (here: another account's).
func TestReview2ReceiptTLVInResponseFormat(t *testing.T) {
	t.Run("lost", func(t *testing.T) {
		e := newEnv(t, nil)
		rec := e.accepted(t, "shop", "k1", "3e8")
		f := receiptFrame("id:1000 sub:001 dlvrd:001 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("3e8\x00")})
		if st := e.deliver(t, f); st != 0 {
			t.Fatal(st)
		}
		if es := queued(t, e.st, accountQueue("shop")); len(es) != 1 || es[0].MessageID != rec.MessageID {
			t.Fatalf("receipt whose TLV (3e8) and text (1000) both name the record: %d queued; want it queued with %s", len(es), rec.MessageID)
		}
	})
	t.Run("wrong record", func(t *testing.T) {
		e := newEnv(t, nil)
		e.accepted(t, "bank", "kb", "4d2")  // decimal 1234
		e.accepted(t, "shop", "ks", "1234") // decimal 4660
		f := receiptFrame("id:4660 sub:001 dlvrd:001 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1234\x00")})
		if st := e.deliver(t, f); st != 0 {
			t.Fatal(st)
		}
		if es := queued(t, e.st, accountQueue("bank")); len(es) != 0 {
			t.Fatalf("shop's receipt (TLV 1234 as in its submit_sm_resp, text id 4660) went to bank as %s", es[0].MessageID)
		}
	})
}

// SPEC §4: only "the same receipt ... same state" is a duplicate. A
// receipt whose state the proxy cannot read (no stat: field it knows the
// name of, no message_state TLV) gets the empty state key, so every such
// receipt of one message is a "duplicate" of the first: here the final
// receipt is acknowledged upstream and dropped.
func TestReview2UnreadableStateIsNotADuplicate(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "shop", "k1", "3e8")
	e.deliver(t, receiptFrame("id:1000 status:ENROUTE err:000 text:"))
	e.deliver(t, receiptFrame("id:1000 status:DELIVRD err:000 text:"))
	if es := queued(t, e.st, accountQueue("shop")); len(es) != 2 {
		t.Fatalf("two different receipts without a readable state: %d queued, want 2", len(es))
	}
}

// Finding 2, continued: once the store takes writes again the Ack is
// written (the entry leaves the queue) without the receipt being sent
// again.
func TestAckRetriedOnceTheStoreRecovers(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "shop", "k1", "3e8")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != 0 {
		t.Fatal(st)
	}
	e.st.FailWrites(errors.New("disk full"))
	t.Cleanup(func() { e.st.FailWrites(nil) })
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "delivered", func() bool { return len(rx.received()) == 1 })
	time.Sleep(300 * time.Millisecond)
	e.st.FailWrites(nil)
	waitFor(t, "queue empty", func() bool { return len(queued(t, e.st, accountQueue("shop"))) == 0 })
	e.svc.kick("shop")
	time.Sleep(100 * time.Millisecond)
	if n := len(rx.received()); n != 1 {
		t.Errorf("delivered %d times, want 1", n)
	}
	d := e.svc.accounts["shop"]
	d.mu.Lock()
	held := len(d.pendingAck)
	d.mu.Unlock()
	if held != 0 || e.svc.Count(DelAckFailed) != 1 {
		t.Errorf("%d Acks still pending, %d ack failures counted; want 0, 1", held, e.svc.Count(DelAckFailed))
	}
}

// Finding 9: the back-off of a refused entry is forgotten once the entry
// has expired.
func TestDispatcherForgetsBackoffOfExpiredEntries(t *testing.T) {
	clk := &r2clock{t: time.Now()}
	st := state.NewMem(clk.now)
	svc, err := New(Config{
		Store:     st,
		Accounts:  map[string]Account{"shop": {Retention: time.Hour, Redelivery: time.Hour}},
		Upstreams: map[string]Upstream{"smsc": {RespIDFormat: Hex, ReceiptIDFormat: Dec}},
		Now:       clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	rcv := &fakeRcv{}
	svc.Attach(rcv, nil)
	svc.Start()
	t.Cleanup(svc.Close)
	now := clk.now()
	for i := range 3 {
		r := &state.Record{Key: state.Key{Account: "shop", Key: fmt.Sprint("k", i)}, State: state.Accepted, Upstream: "smsc",
			MessageID: fmt.Sprintf("%x", 100+i), NormID: fmt.Sprint(100 + i), Created: now, Updated: now, Expires: now.Add(3 * time.Hour)}
		if _, _, err := st.Create(bg, r); err != nil {
			t.Fatal(err)
		}
		if s := svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Frame: dlrFrame(fmt.Sprint(100+i), "DELIVRD")}); s != 0 {
			t.Fatal(s)
		}
	}
	rx := &fakeRx{id: "s1", answer: func(int) (smpp.Status, error) { return smpp.StatusThrottled, nil }}
	rcv.bind("shop", rx)
	svc.kick("shop")
	d := svc.accounts["shop"]
	held := func() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.backoff) }
	waitFor(t, "all three refused", func() bool { return held() == 3 })
	clk.add(2 * time.Hour) // every entry expires
	svc.kick("shop")
	waitFor(t, "back-offs of expired entries forgotten", func() bool { return held() == 0 })
	if n := len(rx.received()); n != 3 {
		t.Errorf("%d deliveries, want 3 (each refused once, then expired)", n)
	}
}

// Finding 3, segments: a part of a concatenated message is found by the
// echoed key among the unknown records with the receipt's addresses; two
// unknown parts resolve nothing, and neither does the address match then.
func TestReview2EchoTLVResolvesTheOnlyUnknownPart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		other    state.SubmitState // state of part 2/2
		resolved bool
	}{{"one unknown part", state.Accepted, true}, {"two unknown parts", state.Unknown, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.Upstreams = map[string]Upstream{"smsc": {RespIDFormat: Hex, ReceiptIDFormat: Dec, EchoTLV: smpp.DefaultIdempotencyTag}}
			})
			eng := dedup.New(dedup.Config{Store: e.st, Forwarder: fwd{}, IDs: e.svc.IDs()})
			e.svc.Attach(e.rcv, eng)
			now := time.Now()
			addr := state.HashAddrs([]byte("SHOP"), []byte("447700900123"))
			mk := func(key, seg string, st state.SubmitState, id string) state.Key {
				r := &state.Record{Key: state.Key{Account: "shop", Key: key, Segment: seg}, State: st, Upstream: "smsc",
					AddrHash: addr, Created: now, Updated: now, Expires: now.Add(time.Hour)}
				if id != "" {
					r.MessageID, r.NormID = id, e.svc.IDs().NormalizeID("smsc", id)
				}
				if _, ok, err := e.st.Create(bg, r); err != nil || !ok {
					t.Fatal(ok, err)
				}
				return r.Key
			}
			part1 := mk(dedup.KeyOfTLV([]byte("long-1")), "1/2", state.Unknown, "")
			id2 := ""
			if tc.other == state.Accepted {
				id2 = "3e9"
			}
			part2 := mk(dedup.KeyOfTLV([]byte("long-1")), "2/2", tc.other, id2)
			other := mk("fp:00", "", state.Unknown, "") // same addresses: the address match alone is ambiguous
			f := receiptFrame("id:4096 sub:001 dlvrd:001 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.DefaultIdempotencyTag, Value: []byte("long-1")})
			if st := e.deliver(t, f); st != 0 {
				t.Fatal(st)
			}
			if tc.resolved {
				waitFor(t, "part resolved", func() bool { r, _ := e.st.Get(bg, part1); return r.State == state.Accepted })
				if r, _ := e.st.Get(bg, part1); r.MessageID != "1000" {
					t.Errorf("part 1/2 resolved with %q, want 1000", r.MessageID)
				}
			} else {
				time.Sleep(1500 * time.Millisecond) // past the settle delay
			}
			for _, k := range []state.Key{part1, part2, other} {
				r, _ := e.st.Get(bg, k)
				want := state.Unknown
				if k == part1 && tc.resolved || k == part2 && tc.other == state.Accepted {
					want = state.Accepted
				}
				if r.State != want {
					t.Errorf("%v: %s, want %s", k, r.State, want)
				}
			}
		})
	}
}

// Finding 5, continued: a receipt whose TLV and text name two records
// under every reading goes to neither; a TLV in the response format
// without a text id still finds its record.
func TestReview2ReceiptIDsConflict(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "bank", "kb", "4d2")         // decimal 1234
	shop := e.accepted(t, "shop", "ks", "3e8") // decimal 1000
	f := receiptFrame("id:1000 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1234\x00")})
	if st := e.deliver(t, f); st != 0 {
		t.Fatal(st)
	}
	time.Sleep(300 * time.Millisecond)
	if b, s := queued(t, e.st, accountQueue("bank")), queued(t, e.st, accountQueue("shop")); len(b)+len(s) != 0 {
		t.Errorf("receipt naming bank's record in its TLV and shop's in its text: %d queued for bank, %d for shop; want it kept", len(b), len(s))
	}
	if l, _ := e.svc.Unmatched(bg, "smsc", 10); len(l) != 1 {
		t.Errorf("%d kept unmatched, want 1", len(l))
	}
	if st := e.deliver(t, receiptFrame("stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("3e8\x00")})); st != 0 {
		t.Fatal(st)
	}
	if es := queued(t, e.st, accountQueue("shop")); len(es) != 1 || es[0].MessageID != shop.MessageID {
		t.Errorf("receipt with only a TLV in the response format: %d queued for shop; want it", len(es))
	}
}
