package dedup

import (
	"errors"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// fakeIDs upper-cases ids as "normalisation" and issues proxy ids to the
// account "proxied".
type fakeIDs struct{ n int }

func (f *fakeIDs) NormalizeID(upstream, id string) string {
	return upstream + ":" + strings.ToUpper(id)
}
func (f *fakeIDs) IssueID(account string) string {
	if account != "proxied" {
		return ""
	}
	f.n++
	return "P" + strings.Repeat("0", 3) + string(rune('0'+f.n))
}

func newIDEngine(t *testing.T, f *fakeForwarder) (*Engine, *state.MemStore) {
	t.Helper()
	c := newClock()
	st := state.NewMem(c.Now)
	return newTestEngine(t, Config{Store: st, Forwarder: f, Now: c.Now, InstanceID: "test", IDs: &fakeIDs{}}), st
}

// message_id: proxy — the ESME gets the proxy id on the first answer, on
// replays and after an operator resolve; the record keeps both ids and the
// upstream id is indexed in its normalised form.
func TestProxyIDsAndNormalisedIndex(t *testing.T) {
	f := &fakeForwarder{}
	e, st := newIDEngine(t, f)
	sub := submit(t, "otp-1", "code 1")
	first := e.Submit(ctx, "proxied", Policy{}, sub)
	if first.Status != 0 || first.MessageID != "P0001" {
		t.Fatalf("Submit(proxied) = %+v, want status 0 with the proxy id P0001", first)
	}
	replay := e.Submit(ctx, "proxied", Policy{}, sub)
	if replay.Outcome != OutReplayed || replay.MessageID != "P0001" {
		t.Errorf("replay = %+v, want the proxy id P0001 replayed", replay)
	}
	rec, err := st.Get(ctx, first.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.MessageID != "m1" || rec.ProxyID != "P0001" || rec.NormID != "up:M1" || rec.AddrHash != state.HashAddrs([]byte("SHOP"), []byte("447700900123")) {
		t.Errorf("record = %+v; want MessageID m1, ProxyID P0001, NormID up:M1 and the address hash", rec)
	}
	if got, err := st.ByMessageID(ctx, "up", "up:M1"); err != nil || got.Key != first.Key {
		t.Errorf("ByMessageID(up, up:M1) = %+v, %v; want the record", got, err)
	}
	if got, err := st.ByProxyID(ctx, "proxied", "P0001"); err != nil || got.Key != first.Key {
		t.Errorf("ByProxyID(proxied, P0001) = %+v, %v; want the record", got, err)
	}

	plain := e.Submit(ctx, "shop", Policy{}, submit(t, "otp-2", "code 2"))
	if plain.MessageID != "m2" {
		t.Errorf("Submit(passthrough) = %+v, want the upstream id m2", plain)
	}
}

// A receipt resolves an unknown record of its upstream only.
func TestResolveFromReceipt(t *testing.T) {
	f := &fakeForwarder{answer: func(int) Result { return Result{Kind: Ambiguous, Err: errors.New("timeout")} }}
	e, _ := newIDEngine(t, f)
	sub := submit(t, "otp-9", "code 9")
	a := e.Submit(ctx, "proxied", Policy{}, sub)
	if a.Outcome != OutUnknown {
		t.Fatalf("Submit = %+v, want unknown", a)
	}
	if _, err := e.ResolveFromReceipt(ctx, a.Key, "other", "77", "test"); !errors.Is(err, ErrNotUnknown) {
		t.Errorf("ResolveFromReceipt(other upstream) = %v, want ErrNotUnknown", err)
	}
	r, err := e.ResolveFromReceipt(ctx, a.Key, "up", "77", "unmatched receipt matched by addresses")
	if err != nil || r.State != state.Accepted || r.MessageID != "77" || r.NormID != "up:77" {
		t.Fatalf("ResolveFromReceipt = %+v, %v; want accepted with 77", r, err)
	}
	if last := r.History[len(r.History)-1]; !strings.HasPrefix(last.Note, "resolved by receipt: ") {
		t.Errorf("last history event = %+v, want a note saying a receipt resolved it", last)
	}
	retry := e.Submit(ctx, "proxied", Policy{}, sub)
	if retry.Status != smpp.StatusOK || retry.MessageID != r.ProxyID || f.count() != 1 {
		t.Errorf("retry after the receipt = %+v (forwards %d); want the proxy id %s replayed, nothing forwarded", retry, f.count(), r.ProxyID)
	}
	if _, err := e.ResolveFromReceipt(ctx, a.Key, "up", "78", "again"); !errors.Is(err, ErrNotUnknown) {
		t.Errorf("second ResolveFromReceipt = %v, want ErrNotUnknown", err)
	}
}
