package dedup

import (
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// A record resent once under resend_after keeps that fact however long its
// history grows: here the resend is followed by many 0x58 answers (each
// retry takes the retryable record over and adds events) and then by a
// second ambiguous outcome. The record's history has long dropped the
// event of the resend; a retry after unknown_timeout must still be held.
func TestResendAfterResendsAtMostOnceWhateverTheHistoryLength(t *testing.T) {
	const throttled = 25
	f := &fakeForwarder{answer: func(n int) Result {
		switch {
		case n == 1, n == 2+throttled+1:
			return Result{Kind: Ambiguous, Err: errors.New("session lost")}
		case n <= 2+throttled:
			return Result{Kind: Answered, Status: smpp.StatusThrottled}
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m-again"}
	}}
	e, st, clk := newEngine(t, f)
	p := Policy{OnUnknown: config.UnknownResendAfter, UnknownTimeout: time.Minute}
	if a := e.Submit(ctx, "shop", p, submit(t, "otp-1", "code")); a.Outcome != OutUnknown {
		t.Fatalf("first submit = %s, want unknown", a.Outcome)
	}
	clk.Advance(2 * time.Minute)
	// The resend (forward 2) and the retries that take over its 0x58.
	for i := range throttled + 2 {
		a := e.Submit(ctx, "shop", p, submit(t, "otp-1", "code"))
		if i == throttled+1 && a.Outcome != OutUnknown {
			t.Fatalf("retry %d = %s, want unknown (forward %d is ambiguous)", i, a.Outcome, f.count())
		}
	}
	before := f.count()
	r, err := st.Get(ctx, state.Key{Account: "shop", Key: KeyOfTLV([]byte("otp-1"))})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != state.Unknown || len(r.History) < maxHistory {
		t.Fatalf("record = %s with %d events; the test needs an unknown record with a full history", r.State, len(r.History))
	}
	clk.Advance(2 * time.Minute)
	a := e.Submit(ctx, "shop", p, submit(t, "otp-1", "code"))
	if f.count() != before {
		t.Errorf("retry after unknown_timeout of a record already resent once was forwarded again (%d forwards, want %d); answer %s", f.count(), before, a.Outcome)
	}
	if a.Outcome != OutUnknown || a.Status != smpp.StatusSysErr {
		t.Errorf("retry = %v %s, want unknown_status (unknown)", a.Status, a.Outcome)
	}
	if r, _ := st.Get(ctx, state.Key{Account: "shop", Key: KeyOfTLV([]byte("otp-1"))}); r == nil || r.Resends != 1 {
		t.Errorf("record resends = %v, want 1", r)
	}
}
