package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// The message index uses the normalised id once a record has one.
func testNormID(t *testing.T, s state.Store, c *Clock) {
	k := state.Key{Account: "acme", Key: "k"}
	mustCreate(t, s, newRecord(c, k, "o"))
	lookup := func(id string, want *state.Record) {
		t.Helper()
		got, err := s.ByMessageID(bg, "smsc", id)
		if want == nil && !errors.Is(err, state.ErrNotFound) || want != nil && (err != nil || !same(got, want)) {
			t.Errorf("ByMessageID(smsc, %q) = %+v, %v; want %+v (nil: ErrNotFound)", id, got, err, want)
		}
	}
	acc := mustUpdate(t, s, k, func(r *state.Record) {
		r.State, r.Upstream, r.MessageID, r.NormID = state.Accepted, "smsc", "0A", "10"
	})
	lookup("10", acc)
	lookup("0A", nil)
	plain := mustUpdate(t, s, k, func(r *state.Record) { r.NormID = "" })
	lookup("10", nil)
	lookup("0A", plain)
}

func testByProxyID(t *testing.T, s state.Store, c *Clock) {
	r := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	r.ProxyID = "p-1"
	mustCreate(t, s, r.Clone())
	lookup := func(account, id string, want *state.Record) {
		t.Helper()
		got, err := s.ByProxyID(bg, account, id)
		if want == nil && !errors.Is(err, state.ErrNotFound) || want != nil && (err != nil || !same(got, want)) {
			t.Errorf("ByProxyID(%q, %q) = %+v, %v; want %+v (nil: ErrNotFound)", account, id, got, err, want)
		}
	}
	lookup("acme", "p-1", r)
	lookup("other", "p-1", nil)
	lookup("acme", "", nil)
	moved := mustUpdate(t, s, r.Key, func(r *state.Record) { r.ProxyID = "p-2" })
	lookup("acme", "p-1", nil)
	lookup("acme", "p-2", moved)
	c.Advance(2 * time.Hour) // past Expires
	lookup("acme", "p-2", nil)
}

func testUnknownByAddr(t *testing.T, s state.Store, c *Clock) {
	h := state.HashAddrs([]byte("SHOP"), []byte("447700900123"))
	other := state.HashAddrs([]byte("SHOP"), []byte("447700900999"))
	mk := func(key string, st state.SubmitState, up string, hash [16]byte) *state.Record {
		r := newRecord(c, state.Key{Account: "acme", Key: key}, "o")
		r.State, r.Upstream, r.AddrHash = st, up, hash
		mustCreate(t, s, r.Clone())
		return r
	}
	u1 := mk("u1", state.Unknown, "smsc", h)
	u2 := mk("u2", state.Unknown, "smsc", h)
	mk("sent", state.Sent, "smsc", h)
	mk("elsewhere", state.Unknown, "smsc-b", h)
	mk("other-addr", state.Unknown, "smsc", other)
	mk("no-upstream", state.Unknown, "", h)

	want := func(what string, keys ...string) {
		t.Helper()
		got, err := s.UnknownByAddr(bg, "smsc", h)
		var names []string
		for _, r := range got {
			names = append(names, r.Key.Key)
		}
		slices.Sort(names)
		if err != nil || !slices.Equal(names, keys) {
			t.Errorf("%s: UnknownByAddr(smsc, h) = %v, %v; want %v", what, names, err, keys)
		}
	}
	want("two unknown", u1.Key.Key, u2.Key.Key)
	if got, err := s.UnknownByAddr(bg, "smsc", [16]byte{}); err != nil || len(got) != 0 {
		t.Errorf("UnknownByAddr(smsc, zero) = %v, %v; want nothing", got, err)
	}
	mustUpdate(t, s, u1.Key, func(r *state.Record) { r.State, r.MessageID = state.Accepted, "m-1" })
	want("one resolved", u2.Key.Key)
	mustUpdate(t, s, u2.Key, func(r *state.Record) { r.AddrHash = other })
	want("addresses changed")
	mustUpdate(t, s, u2.Key, func(r *state.Record) { r.AddrHash = h })
	want("addresses back", u2.Key.Key)
	c.Advance(2 * time.Hour)
	want("expired")
}
