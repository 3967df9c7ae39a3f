package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

func testRoundTrip(t *testing.T, s state.Store, c *Clock) {
	want := fullRecord(c)
	mustCreate(t, s, want.Clone())
	wantGet(t, s, want.Key, want)

	noHistory := newRecord(c, state.Key{Account: "acme", Key: "bare"}, "o")
	noHistory.Expires = time.Time{} // never expires
	mustCreate(t, s, noHistory.Clone())
	c.Advance(100 * 365 * 24 * time.Hour)
	wantGet(t, s, noHistory.Key, noHistory)
}

func testCreateExisting(t *testing.T, s state.Store, c *Clock) {
	k := state.Key{Account: "acme", Key: "k1"}
	first := newRecord(c, k, "owner-1")
	mustCreate(t, s, first.Clone())

	second := newRecord(c, k, "owner-2")
	second.Fingerprint[0] ^= 0xff
	second.State = state.Accepted
	existing, created, err := s.Create(bg, second)
	if err != nil || created || !same(existing, first) {
		t.Fatalf("Create(%v) again = %+v, %v, %v; want %+v, false, nil", k, existing, created, err, first)
	}
	wantGet(t, s, k, first)
}

func testCreateRace(t *testing.T, s state.Store, c *Clock) {
	const n = 64
	k := state.Key{Account: "acme", Key: "race"}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		owners  [n]string // the owner each creator saw win
		created [n]bool
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := fmt.Sprintf("owner-%d", i)
			<-start
			existing, ok, err := s.Create(bg, newRecord(c, k, me))
			switch {
			case err != nil:
				t.Errorf("Create(%v) by %s: %v", k, me, err)
			case ok:
				owners[i], created[i] = me, true
			default:
				owners[i] = existing.Owner
			}
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for _, ok := range created {
		if ok {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d concurrent Create(%v) made %d owners, want 1", n, k, winners)
	}
	got, err := s.Get(bg, k)
	if err != nil {
		t.Fatalf("Get(%v) = %v", k, err)
	}
	for i, o := range owners {
		if o != got.Owner {
			t.Errorf("creator %d saw owner %q, want the stored owner %q", i, o, got.Owner)
		}
	}
}

func testKeysAreExact(t *testing.T, s state.Store, c *Clock) {
	// Tuples that a naive "account\x00key\x00segment" layout would merge.
	keys := []state.Key{
		{Account: "a", Key: "b\x00c", Segment: ""},
		{Account: "a", Key: "b", Segment: "c"},
		{Account: "a", Key: "b", Segment: "\x00c"},
		{Account: "a\x00b", Key: "c"},
		{Account: "a", Key: "b\x01\x01c"},
		{Account: "a", Key: "b", Segment: "1/2"},
		{Account: "a", Key: "b", Segment: "2/2"},
		{Account: "A", Key: "b"},
		{Account: "a", Key: "\xff\xfe binary"},
	}
	for i, k := range keys {
		mustCreate(t, s, newRecord(c, k, fmt.Sprintf("owner-%d", i)))
	}
	for i, k := range keys {
		got, err := s.Get(bg, k)
		if err != nil || got.Key != k || got.Owner != fmt.Sprintf("owner-%d", i) {
			t.Errorf("Get(%q) = %+v, %v; want owner-%d", k, got, err, i)
		}
	}
	wantGet(t, s, state.Key{Account: "a", Key: "c"}, nil)
}

func testNoAliases(t *testing.T, s state.Store, c *Clock) {
	in := fullRecord(c)
	want := in.Clone()
	mustCreate(t, s, in)
	in.Owner, in.History[0].Note = "changed after Create", "changed"
	got, _ := s.Get(bg, want.Key)
	got.Owner, got.History[0].Note = "changed after Get", "changed"
	wantGet(t, s, want.Key, want)
}

func testCanceled(t *testing.T, s state.Store, c *Clock) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	r := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	if _, created, err := s.Create(ctx, r); !errors.Is(err, context.Canceled) || created {
		t.Errorf("Create(canceled ctx) = %v, %v; want context.Canceled", created, err)
	}
	wantGet(t, s, r.Key, nil)
}

func testFailWrites(t *testing.T, backend state.Store, c *Clock) {
	fi := NewFaulty(backend)
	s := state.Store(fi)
	want := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	mustCreate(t, s, want.Clone())
	diskFull := errors.New("disk full")
	fi.FailWrites(diskFull)

	other := newRecord(c, state.Key{Account: "acme", Key: "other"}, "o")
	if got, created, err := s.Create(bg, other); !errors.Is(err, diskFull) || created {
		t.Errorf("Create(%v) refused by the store = %+v, %v, %v; want an error wrapping %v", other.Key, got, created, err, diskFull)
	}
	if got, err := s.Update(bg, want.Key, func(r *state.Record) error { r.Owner = "x"; return nil }); !errors.Is(err, diskFull) {
		t.Errorf("Update(%v) refused by the store = %+v, %v; want an error wrapping %v", want.Key, got, err, diskFull)
	}
	if err := s.Replace(bg, want, other); !errors.Is(err, diskFull) {
		t.Errorf("Replace(%v) refused by the store = %v; want an error wrapping %v", want.Key, err, diskFull)
	}
	wantGet(t, s, other.Key, nil)
	wantGet(t, s, want.Key, want)

	fi.FailWrites(nil)
	mustCreate(t, s, other)
}

func testClosed(t *testing.T, s state.Store, c *Clock) {
	r := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	mustCreate(t, s, r.Clone())
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	checks := map[string]func() error{
		"Create": func() error {
			_, _, err := s.Create(bg, newRecord(c, state.Key{Account: "acme", Key: "new"}, "o"))
			return err
		},
		"Get":         func() error { _, err := s.Get(bg, r.Key); return err },
		"Update":      func() error { _, err := s.Update(bg, r.Key, func(*state.Record) error { return nil }); return err },
		"ByMessageID": func() error { _, err := s.ByMessageID(bg, "smsc", "m"); return err },
		"ByProxyID":   func() error { _, err := s.ByProxyID(bg, "acme", "p"); return err },
		"Scan":        func() error { return s.Scan(bg, func(*state.Record) bool { return true }) },
		"ScanState":   func() error { return s.ScanState(bg, state.Sent, func(*state.Record) bool { return true }) },
		"Replace":     func() error { return s.Replace(bg, r, r) },
	}
	for name, call := range checks {
		if err := call(); !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}
