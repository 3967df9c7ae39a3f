package dlr

// Receipt path behaviours SPEC §4/§5 asks for that a simpler matcher or
// dispatcher gets wrong: late receipts of fingerprint records, echoed keys,
// receipts overtaking their submit_sm_resp, refused Acks, id formats.

import (
	"fmt"
	"github.com/smppproxy/smppproxy/config"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// SPEC §4 / §2: under idempotency.key: fingerprint the record still
// routes a receipt that comes after fingerprint_window (60s): a DELIVRD two
// minutes after the submit is queued for the ESME, not kept unmatched.
func TestFingerprintRecordStillRoutesLateReceipt(t *testing.T) {
	clk := newClock()
	st := state.NewMem(clk.Now)
	cfg := Config{
		Store:     st,
		IDs:       testIDs,
		Accounts:  map[string]Account{"shop": {Route: []string{"smsc"}}},
		Upstreams: map[string]Upstream{"smsc": {}},
		Now:       clk.Now,
		Receivers: &fakeRcv{},
	}
	var eng *dedup.Engine
	resolving(acceptAll{"3e8"}, &eng)(&cfg)
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	t.Cleanup(svc.Close)

	a := eng.Submit(bg, "shop", dedup.Policy{Key: config.KeyFingerprint}, keyedSubmit(t, "", "447700900123"))
	if a.Status != smpp.StatusOK || a.MessageID != "3e8" {
		t.Fatalf("submit = %+v, want accepted with 3e8", a)
	}
	clk.Advance(2 * time.Minute) // a normal receipt delay; fingerprint_window is 60s
	if st := svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: dlrFrame("1000", "DELIVRD")}); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v", st)
	}
	if es := queued(t, st, accountQueue("shop")); len(es) != 1 {
		kept, _ := svc.Unmatched(bg, "smsc", 10)
		t.Fatalf("receipt 2 minutes after a fingerprint-keyed submit: %d queued for shop, %d kept unmatched; want it queued for shop", len(es), len(kept))
	}
}

// SPEC §5 (echo_tlv): two accounts may use the same key; an echoed key
// resolves only the unknown record it names, never an accepted record of
// another account with another message id (that would send shop's receipt
// to bank, rewritten to bank's id, and leave shop's record unknown).
//
// The case is built so that picking the wrong record cannot depend on the
// order accounts are tried: in "part", shop's record is a part of a long
// message, so bank's whole record is the only one found by the key over
// the accounts (shop's part is found among the records with the receipt's
// addresses); in "whole", bank sorts before shop. The settle delay (an
// hour) passes on the injected clock: no waiting.
func TestEchoedKeyDoesNotPickAnotherAccountsRecord(t *testing.T) {
	for _, tc := range []struct{ name, segment, dst string }{
		{"whole", "", "447700900999"}, // another destination: the address match cannot settle it
		{"part", "1/2", "447700900123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			var eng *dedup.Engine
			e := newEnv(t, func(c *Config) {
				c.Upstreams = map[string]Upstream{"smsc": {EchoTLV: smpp.DefaultIdempotencyTag, ResponseTimeout: time.Hour}}
				c.Now = clk.Now
			}, resolving(fwd{}, &eng))
			key := dedup.KeyOfTLV([]byte("order-1"))
			e.accepted(t, "bank", key, "3e9") // bank's own order-1, accepted
			shop := state.Key{Account: "shop", Key: key, Segment: tc.segment}
			now := clk.Now()
			r := &state.Record{Key: shop, State: state.Unknown, Upstream: "smsc", Session: "smsc/1",
				AddrHash: state.HashAddrs([]byte("SHOP"), []byte(tc.dst)), Created: now, Updated: now, Expires: now.Add(time.Hour)}
			if _, ok, err := e.st.Create(bg, r); err != nil || !ok {
				t.Fatal(ok, err)
			}
			// shop's message: the upstream names it 4096 and echoes shop's key.
			f := receiptFrame("id:4096 sub:001 dlvrd:001 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.DefaultIdempotencyTag, Value: []byte("order-1")})
			if st := e.deliver(t, f); st != 0 {
				t.Fatal(st)
			}
			clk.Advance(time.Hour + settleMargin + time.Second) // past the settle delay, on the injected clock
			waitFor(t, "kept receipt settled", func() bool { l, _ := e.svc.Unmatched(bg, "smsc", 10); return len(l) == 0 })
			if es := queued(t, e.st, accountQueue("bank")); len(es) != 0 {
				t.Fatalf("shop's receipt (echoing shop's key) was queued for bank as %q", es[0].MessageID)
			}
			if got, _ := e.st.Get(bg, shop); got.State != state.Accepted || got.MessageID != "1000" {
				t.Fatalf("shop's record %s %q; want accepted with 1000", got.State, got.MessageID)
			}
		})
	}
}

// SPEC §5: an unmatched receipt resolves an unknown record only when that
// record is the only one it can be. A receipt that overtakes its own
// submit_sm_resp (the record is still `sent`) does not resolve another,
// older unknown record with the same addresses (that would give it the
// other message's id: two records, one id).
func TestReconcileIgnoresUnknownWhileSentRecordHasSameAddresses(t *testing.T) {
	// The second record of settleScene stays `sent` for the whole test, as
	// a real one does for up to the upstream's response_timeout.
	e, eng, clk := clockedEnv(t, map[string]Upstream{"smsc": {ResponseTimeout: 10 * time.Second}})
	key, at := settleScene(t, e, eng, clk) // within the settle delay: matched by id only
	wantStillUnknown(t, e, key, at)
}

// SPEC §4: delivery is at-least-once *until* a deliver_sm_resp 0. An entry
// the ESME acknowledged is not sent again while the store refuses its Ack
// (disk full).
func TestAckFailureDoesNotResendAcknowledgedReceipt(t *testing.T) {
	_, fq, rx := ackRefusedOnDelivery(t)
	// Each refused Ack is a moment a resend would come: three of them.
	waitFor(t, "the Ack refused three times", func() bool { return fq.refused.Load() >= 3 })
	if n := len(rx.received()); n != 1 {
		t.Fatalf("one receipt, acknowledged with status 0 every time: delivered %d times while the store refused 3 Acks; want 1", n)
	}
}

// The reconciler forgets the schedules of expired kept receipts even when
// more are kept than one pass reads (maxScan): its memory does not grow
// with every unmatched receipt ever seen.
func TestReconcilerForgetsScheduleOfExpiredEntries(t *testing.T) {
	clk := newClock()
	st := state.NewMem(clk.Now)
	svc, err := New(Config{Store: st, Accounts: map[string]Account{"shop": {}}, Upstreams: map[string]Upstream{"smsc": {}}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	t.Cleanup(svc.Close)
	body := dlrFrame("1", "DELIVRD")[smpp.HeaderLen:]
	put := func(n int, ttl time.Duration) {
		for range n {
			e := &state.QueueEntry{Queue: unmatchedQueue("smsc"), Kind: KindUnmatched, Upstream: "smsc", MessageID: "1",
				Command: smpp.CmdDeliverSM, Body: body, Enqueued: clk.Now(), Expires: clk.Now().Add(ttl)}
			if _, _, err := st.Enqueue(bg, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(6000, time.Hour)   // expire first
	put(6000, 3*time.Hour) // still kept after that
	svc.rec.note("smsc")
	sched := func() int { svc.rec.mu.Lock(); defer svc.rec.mu.Unlock(); return len(svc.rec.next) }
	testkit.Eventually(t, 10*time.Second, func() bool { return sched() >= 12000 }, "12000 kept receipts tried")
	clk.Advance(90 * time.Minute) // the first 6000 expire
	waitFor(t, "schedules of the 6000 expired kept receipts forgotten", func() bool { return sched() <= 6000 })
}

// SPEC §4: "matched by receipted_message_id TLV, else by the id: field".
// An SMSC that answers in hex and writes receipt texts in decimal commonly
// puts the TLV in its submit_sm_resp form (SMPP v3.4: "SMSC message ID of
// receipted message"). Such a TLV still finds its record ("lost"), and a
// digits-only hex TLV is not read as decimal to name another account's
// record ("wrong record").
func TestReceiptTLVInResponseFormat(t *testing.T) {
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

// SPEC §4: only "the same receipt ... same state" is a duplicate. Two
// receipts of one message whose state the proxy cannot read (no stat:
// field it knows, no message_state TLV) but whose bodies differ are both
// queued.
func TestUnreadableStateIsNotADuplicate(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "shop", "k1", "3e8")
	e.deliver(t, receiptFrame("id:1000 status:ENROUTE err:000 text:"))
	e.deliver(t, receiptFrame("id:1000 status:DELIVRD err:000 text:"))
	if es := queued(t, e.st, accountQueue("shop")); len(es) != 2 {
		t.Fatalf("two different receipts without a readable state: %d queued, want 2", len(es))
	}
}

// Once the store takes writes again, the Ack of an acknowledged entry is
// written (the entry leaves the queue) without the receipt being sent
// again.
func TestAckRetriedOnceTheStoreRecovers(t *testing.T) {
	e, fq, rx := ackRefusedOnDelivery(t)
	waitFor(t, "the Ack refused and retried", func() bool { return fq.refused.Load() >= 2 })
	fq.fail.Store(false)
	waitFor(t, "queue empty", func() bool { return len(queued(t, e.st, accountQueue("shop"))) == 0 })
	if n := len(rx.received()); n != 1 {
		t.Errorf("delivered %d times, want 1", n)
	}
	d := e.svc.accounts["shop"]
	d.mu.Lock()
	held := len(d.seqsLocked(entryAckPending))
	d.mu.Unlock()
	if held != 0 || e.svc.Count(DelAckFailed) != 1 {
		t.Errorf("%d Acks still pending, %d ack failures counted; want 0, 1", held, e.svc.Count(DelAckFailed))
	}
}

// The back-off of a refused entry is forgotten once the entry
// has expired.
func TestDispatcherForgetsBackoffOfExpiredEntries(t *testing.T) {
	clk := newClock()
	st := state.NewMem(clk.Now)
	rcv := &fakeRcv{}
	svc, err := New(Config{
		Store:     st,
		IDs:       testIDs,
		Accounts:  map[string]Account{"shop": {Retention: time.Hour, Redelivery: time.Hour}},
		Upstreams: map[string]Upstream{"smsc": {}},
		Now:       clk.Now,
		Receivers: rcv,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	t.Cleanup(svc.Close)
	now := clk.Now()
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
	held := func() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.seqsLocked(entryRefused)) }
	waitFor(t, "all three refused", func() bool { return held() == 3 })
	clk.Advance(2 * time.Hour) // every entry expires
	svc.kick("shop")
	waitFor(t, "back-offs of expired entries forgotten", func() bool { return held() == 0 })
	if n := len(rx.received()); n != 3 {
		t.Errorf("%d deliveries, want 3 (each refused once, then expired)", n)
	}
}

// SPEC §5 (echo_tlv), segments: a part of a concatenated message is found by the
// echoed key among the unknown records with the receipt's addresses; two
// unknown parts resolve nothing, and neither does the address match then.
func TestEchoedKeyResolvesTheOnlyUnknownPart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		other    state.SubmitState // state of part 2/2
		resolved bool
	}{{"one unknown part", state.Accepted, true}, {"two unknown parts", state.Unknown, false}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			var eng *dedup.Engine
			e := newEnv(t, func(c *Config) {
				c.Upstreams = map[string]Upstream{"smsc": {EchoTLV: smpp.DefaultIdempotencyTag}}
				c.Now = clk.Now
			}, resolving(fwd{}, &eng))
			now := clk.Now()
			addr := state.HashAddrs([]byte("SHOP"), []byte("447700900123"))
			mk := func(key, seg string, st state.SubmitState, id string) state.Key {
				r := &state.Record{Key: state.Key{Account: "shop", Key: key, Segment: seg}, State: st, Upstream: "smsc",
					AddrHash: addr, Created: now, Updated: now, Expires: now.Add(time.Hour)}
				if id != "" {
					r.MessageID, r.NormID = id, testIDs.NormalizeID("smsc", id)
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
			clk.Advance(settleMargin + time.Second) // past the settle delay, on the injected clock
			if tc.resolved {
				waitFor(t, "part resolved", func() bool { r, _ := e.st.Get(bg, part1); return r.State == state.Accepted })
				if r, _ := e.st.Get(bg, part1); r.MessageID != "1000" {
					t.Errorf("part 1/2 resolved with %q, want 1000", r.MessageID)
				}
			} else {
				e.waitTried(t, clk.Now()) // tried past the settle delay
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

// SPEC §4: a receipt whose TLV and text name two records
// under every reading goes to neither; a TLV in the response format
// without a text id still finds its record.
func TestReceiptIDsConflict(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "bank", "kb", "4d2")         // decimal 1234
	shop := e.accepted(t, "shop", "ks", "3e8") // decimal 1000
	f := receiptFrame("id:1000 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1234\x00")})
	if st := e.deliver(t, f); st != 0 {
		t.Fatal(st)
	}
	e.waitTried(t, time.Time{})
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
