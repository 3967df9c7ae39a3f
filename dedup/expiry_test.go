package dedup

// A takeover of a retryable (or unknown) record extends its Expires (fixed
// at Create to Created+retention) past the forward. Otherwise a takeover
// shortly before the end of retention forwards the submit, the record
// expires while the upstream answers, the owner's outcome write fails
// (ErrNotFound) and the ESME gets ESME_RSYSERR although the SMSC accepted
// the message; its retry finds no record and is forwarded again: a second
// SMS.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

func expSubmit(t *testing.T, key, text string) *smpp.Submit {
	t.Helper()
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(7, smpptest.SubmitFields{
		Src: "SHOP", Dst: "447700900123", ShortMessage: []byte(text),
		TLVs: []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTakeoverNearEndOfRetentionIsNotSentTwice(t *testing.T) {
	clk := newClock()
	st := state.NewMem(clk.Now)
	f := scripted(func(n int) Result {
		switch n {
		case 1: // first try: upstream throttles → retryable
			return Result{Kind: Answered, Status: smpp.StatusThrottled}
		case 2: // the takeover: the SMSC accepts, answering within response_timeout
			clk.Advance(10 * time.Second)
			return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m2"}
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: fmt.Sprintf("m%d", n)}
	})
	e := newTestEngine(t, Config{Store: st, Forwarder: f, Now: clk.Now, InstanceID: "exp"})
	p := Policy{Retention: time.Hour, InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	a1 := e.Submit(bg, "shop", p, expSubmit(t, "otp-1", "code 123456"))
	if a1.Status != smpp.StatusThrottled {
		t.Fatalf("first submit = %v %s, want ESME_RTHROTTLED (retryable)", a1.Status, a1.Outcome)
	}
	// The ESME retries 5 s before the record's retention ends.
	clk.Advance(time.Hour - 5*time.Second)
	a2 := e.Submit(bg, "shop", p, expSubmit(t, "otp-1", "code 123456"))
	// Whatever a2 got, a retry must not reach the SMSC a second time.
	a3 := e.Submit(bg, "shop", p, expSubmit(t, "otp-1", "code 123456"))
	if n := f.Calls(); n != 2 {
		t.Errorf("forwards = %d, want 2 (one throttled, one accepted): the accepted message was sent again "+
			"(takeover answer %v %q %s; retry answer %v %q %s)", n, a2.Status, a2.MessageID, a2.Outcome, a3.Status, a3.MessageID, a3.Outcome)
	}
	if a2.Status != smpp.StatusOK || a2.MessageID != "m2" {
		t.Errorf("takeover answer = %v %q %s, want status 0 with m2 (the SMSC accepted it)", a2.Status, a2.MessageID, a2.Outcome)
	}
}
