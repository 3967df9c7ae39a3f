package dedup

import (
	"testing"

	"github.com/smppproxy/smppproxy/state"
)

// collidingIDs issues the same proxy id twice (what a short proxy_id style
// — 8 decimal digits is allowed — does by the birthday bound after some
// 10^4 records of one account), then another.
type collidingIDs struct{ n int }

func (c *collidingIDs) NormalizeID(upstream, id string) string { return id }
func (c *collidingIDs) IssueID(account string) string {
	c.n++
	if c.n <= 2 {
		return "12345678"
	}
	return "87654321"
}

// SPEC §3.6 / §4 (message_id: proxy): the ESME must be able to tell its
// messages apart by the id it is given; receipts are rewritten to it and
// query_sm/cancel_sm look the record up by it. Proxy ids are drawn at
// random, so an id a live record of the account holds is drawn again;
// otherwise the ESME would get two receipts with one id and the proxy-id
// index (query_sm, cancel_sm) would point at only one of them.
func TestProxyIDsAreUniquePerAccount(t *testing.T) {
	c := newClock()
	st := state.NewMem(c.Now)
	e := newTestEngine(t, Config{Store: st, Forwarder: &fakeForwarder{}, Now: c.Now, InstanceID: "test", IDs: &collidingIDs{}})
	a := e.Submit(ctx, "proxied", Policy{}, submit(t, "otp-1", "code 1"))
	b := e.Submit(ctx, "proxied", Policy{}, submit(t, "otp-2", "code 2"))
	if a.Status != 0 || b.Status != 0 {
		t.Fatalf("submits = %+v, %+v; want both accepted", a, b)
	}
	if a.MessageID == b.MessageID {
		t.Fatalf("two messages of one account were both given message id %q", a.MessageID)
	}
	if got, err := st.ByProxyID(ctx, "proxied", a.MessageID); err != nil || got.Key != a.Key {
		t.Errorf("ByProxyID(%s) = %v, %v; want the first record", a.MessageID, got, err)
	}
}
