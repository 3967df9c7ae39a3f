package dedup

// Under on_unknown: resend_after, whether a retry may forward an unknown
// record again ("at most once more": UnknownTimeout elapsed and no earlier
// resend) is decided again inside takeover's atomic Update, not only on the
// record returned by Create. Otherwise a retry whose Create saw the record
// before another retry's resend, and whose takeover runs after that resend
// ended unknown again, resends a second time: three copies upstream, where
// the policy promises at most two. SPEC §3.2 asks for exactly one owner among
// concurrent submits of one key across processes sharing a store; two
// engines on one store model that (in one process the same interleaving
// needs the second retry's Update to lag its Create by a whole forward).

import (
	"context"
	"github.com/smppproxy/smppproxy/config"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

type raceMarker struct{}

// raceStore delays the first Update made with a marked context until
// released: the gap between a retry's Create and its takeover.
type raceStore struct {
	state.Store
	once    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *raceStore) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	if ctx.Value(raceMarker{}) != nil && s.once.CompareAndSwap(false, true) {
		close(s.entered)
		<-s.release
	}
	return s.Store.Update(ctx, k, fn)
}

func TestResendAfterResendsAtMostOnceUnderRace(t *testing.T) {
	clk := newClock()
	mem := state.NewMem(clk.Now)
	slow := &raceStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	forwards := timingOut()             // shared: the forwards of both processes
	secret, err := state.RandomSecret() // one install: both processes key fingerprints alike
	if err != nil {
		t.Fatal(err)
	}
	a := newTestEngine(t, Config{Store: mem, Forwarder: forwards, Now: clk.Now, InstanceID: "a", Secret: secret})
	b := newTestEngine(t, Config{Store: slow, Forwarder: forwards, Now: clk.Now, InstanceID: "b", Secret: secret})
	p := Policy{OnUnknown: config.UnknownResendAfter, UnknownTimeout: time.Minute, InflightWait: 50 * time.Millisecond}
	sub := func() *smpp.Submit {
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(9, smpptest.SubmitFields{
			Src: "SHOP", Dst: "447700900123", ShortMessage: []byte("your code"),
			TLVs: []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte("otp-r")}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	bg := context.Background()

	if got := a.Submit(bg, "shop", p, sub()); got.Outcome != OutUnknown {
		t.Fatalf("first submit = %s, want unknown", got.Outcome)
	}
	clk.Advance(2 * time.Minute) // unknown_timeout elapsed: one resend allowed

	done := make(chan Answer, 1)
	go func() { done <- b.Submit(context.WithValue(bg, raceMarker{}, true), "shop", p, sub()) }()
	<-slow.entered // b's Create saw the record unknown, never resent

	if got := a.Submit(bg, "shop", p, sub()); got.Outcome != OutUnknown {
		t.Fatalf("resend = %s, want unknown (it timed out again)", got.Outcome)
	}
	close(slow.release)
	<-done

	if n := forwards.Calls(); n != 2 {
		t.Errorf("forwards = %d, want 2 (the original and one resend): resend_after resent an unknown record twice", n)
	}
}
