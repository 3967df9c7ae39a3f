package dlr

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// settleScene makes an unknown record (otp-1) and a `sent` one (otp-2) to
// the same number on upstream smsc, then otp-2's receipt, which overtakes
// its submit_sm_resp; then two seconds pass (more than the settle margin,
// less than the response_timeouts). It returns the unknown record's key
// and the time then.
func settleScene(t *testing.T, e *env, eng *dedup.Engine, clk *testkit.Clock) (state.Key, time.Time) {
	t.Helper()
	old := eng.Submit(bg, "shop", dedup.Policy{}, keyedSubmit(t, "otp-1", "447700900123"))
	if old.Outcome != dedup.OutUnknown {
		t.Fatalf("first submit = %+v, want unknown", old)
	}
	now := clk.Now()
	second := &state.Record{
		Key: state.Key{Account: "shop", Key: dedup.KeyOfTLV([]byte("otp-2"))}, State: state.Sent, Upstream: "smsc",
		Session: "smsc/1", Sequence: 2, AddrHash: state.HashAddrs([]byte("SHOP"), []byte("447700900123")),
		Created: now, Updated: now, Expires: now.Add(time.Hour),
	}
	if _, ok, err := e.st.Create(bg, second); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if st := e.deliver(t, dlrFrame("4096", "ACCEPTD")); st != 0 {
		t.Fatal(st)
	}
	clk.Advance(2 * time.Second)
	e.svc.rec.kick()
	return old.Key, clk.Now()
}

// clockedEnv is an env on a test clock with upstreams, and its engine.
func clockedEnv(t *testing.T, upstreams map[string]Upstream) (*env, *dedup.Engine, *testkit.Clock) {
	var eng *dedup.Engine
	clk := newClock()
	e := newEnv(t, func(c *Config) {
		c.Now = clk.Now
		c.Upstreams = upstreams
	}, resolving(fwd{}, &eng))
	return e, eng, clk
}

// wantStillUnknown waits until the reconciler has tried the kept receipt
// after at, or settled the record key with it, and wants the record still
// unknown.
func wantStillUnknown(t *testing.T, e *env, key state.Key, at time.Time) {
	t.Helper()
	settled := func() bool { r, _ := e.st.Get(bg, key); return r != nil && r.State != state.Unknown }
	waitFor(t, "the kept receipt tried", func() bool { return settled() || e.triedAfter(at) })
	if r, _ := e.st.Get(bg, key); r.State != state.Unknown {
		t.Fatalf("the unknown record became %s with id %q from a kept receipt that may be another message's; want it left unknown", r.State, r.MessageID)
	}
}

// An upstream a reload adds (Reconfigure) has its response_timeout in
// force for the receipts it sends: a kept receipt of it waits that long
// before it may settle an unknown record by addresses. (The receipt
// service kept the upstreams it started with, so an added upstream's
// receipts settled after a second, and took another message's id.)
func TestAnUpstreamAddedByReconfigureHasItsSettleDelay(t *testing.T) {
	e, eng, clk := clockedEnv(t, map[string]Upstream{"other": {ResponseTimeout: 10 * time.Second}})
	accounts := e.svc.pol.Load().accounts
	if err := e.svc.Reconfigure(accounts, nil, "", map[string]Upstream{"other": {ResponseTimeout: 10 * time.Second}, "smsc": {ResponseTimeout: 10 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	key, at := settleScene(t, e, eng, clk)
	wantStillUnknown(t, e, key, at)
}

// A kept receipt of an upstream no longer configured (a reload removed
// it) waits as long as the longest response_timeout configured, not
// only the margin, before it may settle an unknown record.
func TestAReceiptOfAnUpstreamNotConfiguredWaitsTheLongestSettleDelay(t *testing.T) {
	e, eng, clk := clockedEnv(t, map[string]Upstream{"other": {ResponseTimeout: 10 * time.Second}})
	key, at := settleScene(t, e, eng, clk)
	wantStillUnknown(t, e, key, at)
}

// A receipt that carries no submit date (its id and state in TLVs alone)
// settles no unknown record by its addresses: it gives no time, and may
// be the late receipt of a message much older than the record.
func TestAReceiptWithoutASubmitDateSettlesNothingByAddresses(t *testing.T) {
	e, eng, clk := clockedEnv(t, nil)
	a := eng.Submit(bg, "shop", dedup.Policy{}, keyedSubmit(t, "otp-today", "447700900123"))
	if a.Outcome != dedup.OutUnknown {
		t.Fatalf("submit = %+v, want unknown", a)
	}
	clk.Advance(time.Minute)
	f := receiptFrame("", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("4a\x00")},
		smpp.TLV{Tag: smpp.TagMessageState, Value: []byte{3}}) // EXPIRED
	if st := e.deliver(t, f); st != 0 {
		t.Fatal(st)
	}
	clk.Advance(settleMargin + time.Second)
	e.svc.rec.kick()
	wantStillUnknown(t, e, a.Key, clk.Now())
}
