package dedup

import (
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

// ambiguousFirst loses the first forward's answer (the session dropped)
// and accepts the next ones as m-resent.
var ambiguousFirst = firstThen(Result{Kind: Ambiguous, Err: errors.New("session lost")}, Result{Kind: Answered, Status: 0, MessageID: "m-resent"})

func TestOnUnknownPolicies(t *testing.T) {
	tests := map[string]struct {
		p        Policy
		advance  time.Duration
		retries  int
		wantFwd  int
		wantLast Answer
	}{
		"hold never resends": {
			p: Policy{}, advance: time.Hour, retries: 3, wantFwd: 1,
			wantLast: Answer{Status: smpp.StatusSysErr, Outcome: OutUnknown},
		},
		"resend_after before the timeout holds": {
			p: Policy{OnUnknown: config.UnknownResendAfter, UnknownTimeout: time.Minute}, advance: 30 * time.Second, retries: 2, wantFwd: 1,
			wantLast: Answer{Status: smpp.StatusSysErr, Outcome: OutUnknown},
		},
		"resend_after after the timeout resends once": {
			p: Policy{OnUnknown: config.UnknownResendAfter, UnknownTimeout: time.Minute}, advance: 2 * time.Minute, retries: 3, wantFwd: 2,
			wantLast: Answer{Status: 0, MessageID: "m-resent", Outcome: OutReplayed},
		},
		"resend forwards the first retry": {
			p: Policy{OnUnknown: config.UnknownResend}, retries: 1, wantFwd: 2,
			wantLast: Answer{Status: 0, MessageID: "m-resent", Outcome: OutForwarded},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeForwarder{answer: ambiguousFirst}
			e, _, clk := newEngine(t, f)
			first := e.Submit(ctx, "shop", tc.p, submit(t, "u1", "code"))
			if first.Outcome != OutUnknown {
				t.Fatalf("first = %s, want unknown", first.Outcome)
			}
			clk.Advance(tc.advance)
			var last Answer
			for range tc.retries {
				last = e.Submit(ctx, "shop", tc.p, submit(t, "u1", "code"))
			}
			if last.Status != tc.wantLast.Status || last.MessageID != tc.wantLast.MessageID || last.Outcome != tc.wantLast.Outcome {
				t.Errorf("last retry = {%v %q %s}, want {%v %q %s}", last.Status, last.MessageID, last.Outcome, tc.wantLast.Status, tc.wantLast.MessageID, tc.wantLast.Outcome)
			}
			if f.count() != tc.wantFwd {
				t.Errorf("forwards = %d, want %d", f.count(), tc.wantFwd)
			}
		})
	}
}

func TestResendAfterOnlyOnceEvenIfUnknownAgain(t *testing.T) {
	f := &fakeForwarder{answer: func(int) Result { return Result{Kind: Ambiguous} }}
	e, _, clk := newEngine(t, f)
	p := Policy{OnUnknown: config.UnknownResendAfter, UnknownTimeout: time.Minute}
	e.Submit(ctx, "shop", p, submit(t, "u2", "code"))
	for range 3 {
		clk.Advance(2 * time.Minute)
		e.Submit(ctx, "shop", p, submit(t, "u2", "code"))
	}
	if f.count() != 2 {
		t.Errorf("forwards = %d, want 2 (the original and one resend)", f.count())
	}
}

func TestRetryableAfterValidityIsNotSentLate(t *testing.T) {
	f := &fakeForwarder{answer: func(int) Result { return Result{Kind: Answered, Status: smpp.StatusThrottled} }}
	e, st, clk := newEngine(t, f)
	mk := func() *smpp.Submit {
		fs := smpptest.SubmitFields{Dst: "4477", ShortMessage: []byte("otp 5"), Validity: "000000000500000R", // 5 minutes
			TLVs: []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte("v1")}}}
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, fs))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a := e.Submit(ctx, "shop", Policy{}, mk()); a.Status != smpp.StatusThrottled {
		t.Fatalf("first = %v, want 0x58 relayed", a.Status)
	}
	clk.Advance(6 * time.Minute)
	a := e.Submit(ctx, "shop", Policy{}, mk())
	if a.Status != smpp.StatusInvExpiry || f.count() != 1 {
		t.Errorf("retry after validity = %v (forwards %d), want ESME_RINVEXPIRY and no new forward", a.Status, f.count())
	}
	rec, _ := st.Get(ctx, state.Key{Account: "shop", Key: "k:v1"})
	if rec == nil || rec.State != state.Rejected {
		t.Errorf("record = %+v, want rejected", rec)
	}
}

func TestOperatorResolvesUnknownRecordsAsAcceptedOrNotSent(t *testing.T) {
	f := &fakeForwarder{answer: func(int) Result { return Result{Kind: Ambiguous} }}
	e, _, _ := newEngine(t, f)
	e.Submit(ctx, "shop", Policy{}, submit(t, "r1", "x"))
	e.Submit(ctx, "shop", Policy{}, submit(t, "r2", "y"))
	k1 := state.Key{Account: "shop", Key: "k:r1"}
	k2 := state.Key{Account: "shop", Key: "k:r2"}
	if _, err := e.ResolveAccepted(ctx, k1, "", "op"); err == nil {
		t.Errorf("ResolveAccepted without a message id succeeded")
	}
	if r, err := e.ResolveAccepted(ctx, k1, "smsc-77", "op"); err != nil || r.State != state.Accepted {
		t.Fatalf("Resolve(message id) = %+v, %v", r, err)
	}
	if _, err := e.ResolveAccepted(ctx, k1, "smsc-78", "op"); !errors.Is(err, ErrNotUnknown) {
		t.Errorf("second Resolve = %v, want ErrNotUnknown", err)
	}
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "r1", "x")); a.Status != 0 || a.MessageID != "smsc-77" {
		t.Errorf("retry after resolve = {%v %q}, want {0 smsc-77}", a.Status, a.MessageID)
	}
	if r, err := e.ResolveNotSent(ctx, k2, "op"); err != nil || r.State != state.Retryable {
		t.Fatalf("Resolve(not sent) = %+v, %v", r, err)
	}
	f.answer = nil
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "r2", "y")); a.Status != 0 || a.Outcome != OutForwarded || f.count() != 3 {
		t.Errorf("retry after not-sent = {%v %s}, forwards %d; want forwarded again (3)", a.Status, a.Outcome, f.count())
	}
}
