package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

func testUpdateConcurrent(t *testing.T, s state.Store, c *Clock) {
	const n = 64
	k := state.Key{Account: "acme", Key: "counter"}
	mustCreate(t, s, newRecord(c, k, "o"))
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Update(bg, k, func(r *state.Record) error { r.Attempts++; return nil }); err != nil {
				t.Errorf("Update(%v) = %v", k, err)
			}
		}()
	}
	wg.Wait()
	if got, err := s.Get(bg, k); err != nil || got.Attempts != n {
		t.Errorf("after %d concurrent increments Get(%v) = %+v, %v; want Attempts %d", n, k, got, err, n)
	}
}

func testUpdateCAS(t *testing.T, s state.Store, c *Clock) {
	const n = 16
	k := state.Key{Account: "acme", Key: "cas"}
	mustCreate(t, s, newRecord(c, k, "o"))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("msg-%d", i)
			got, err := s.Update(bg, k, func(r *state.Record) error {
				if r.State != state.Sent {
					return state.ErrAbort
				}
				r.State, r.Upstream, r.MessageID = state.Accepted, "smsc", id
				return nil
			})
			switch {
			case err == nil:
				mu.Lock()
				wins = append(wins, id)
				mu.Unlock()
				if got.MessageID != id || got.State != state.Accepted {
					t.Errorf("Update(%v) = %+v; want the record it stored (%s)", k, got, id)
				}
			case errors.Is(err, state.ErrAbort):
				if got == nil || got.State != state.Accepted {
					t.Errorf("aborted Update(%v) = %+v; want the current (accepted) record", k, got)
				}
			default:
				t.Errorf("Update(%v) = %v", k, err)
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d concurrent Sent→Accepted transitions of %v succeeded: %v; want 1", n, k, wins)
	}
	if got, err := s.Get(bg, k); err != nil || got.MessageID != wins[0] {
		t.Errorf("Get(%v) = %+v, %v; want MessageID %s", k, got, err, wins[0])
	}
}

func testUpdateFnError(t *testing.T, s state.Store, c *Clock) {
	want := fullRecord(c)
	k := want.Key
	mustCreate(t, s, want.Clone())
	boom := errors.New("boom")
	for _, fnErr := range []error{boom, state.ErrAbort} {
		got, err := s.Update(bg, k, func(r *state.Record) error {
			r.State, r.Owner, r.History = state.Rejected, "intruder", nil
			return fnErr
		})
		if !errors.Is(err, fnErr) || !same(got, want) {
			t.Errorf("Update(%v) with fn error %v = %+v, %v;\nwant %+v, %v", k, fnErr, got, err, want, fnErr)
		}
		wantGet(t, s, k, want)
	}
	got, err := s.Update(bg, k, func(r *state.Record) error { panic("fn bug") })
	if err == nil {
		t.Errorf("Update(%v) with a panicking fn = %+v, nil; want an error", k, got)
	}
	wantGet(t, s, k, want)
}

func testUpdateMissing(t *testing.T, s state.Store, c *Clock) {
	k := state.Key{Account: "acme", Key: "missing"}
	called := false
	got, err := s.Update(bg, k, func(*state.Record) error { called = true; return nil })
	if !errors.Is(err, state.ErrNotFound) || called {
		t.Errorf("Update(%v) = %+v, %v (fn called: %v); want ErrNotFound, fn not called", k, got, err, called)
	}
}

func testUpdateKeyChange(t *testing.T, s state.Store, c *Clock) {
	want := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	mustCreate(t, s, want.Clone())
	other := state.Key{Account: "acme", Key: "other"}
	_, err := s.Update(bg, want.Key, func(r *state.Record) error { r.Key = other; r.Owner = "x"; return nil })
	if err == nil {
		t.Errorf("Update(%v) moving the record to %v = nil error; want an error", want.Key, other)
	}
	wantGet(t, s, want.Key, want)
	wantGet(t, s, other, nil)
}

func testExpiry(t *testing.T, s state.Store, c *Clock) {
	old := newRecord(c, state.Key{Account: "acme", Key: "old"}, "owner-1")
	old.Expires = c.Now().Add(time.Minute)
	old.Upstream, old.MessageID, old.Session, old.Sequence = "smsc", "m-1", "smsc/1", 1
	mustCreate(t, s, old.Clone())
	c.Advance(time.Minute - time.Nanosecond)
	wantGet(t, s, old.Key, old)

	c.Advance(time.Nanosecond) // exactly Expires: expired
	wantGet(t, s, old.Key, nil)
	if got, err := s.Update(bg, old.Key, func(*state.Record) error { return nil }); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Update(%v) of an expired record = %+v, %v; want ErrNotFound", old.Key, got, err)
	}
	if got, err := s.ByMessageID(bg, "smsc", "m-1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("ByMessageID(smsc, m-1) of an expired record = %+v, %v; want ErrNotFound", got, err)
	}
	if n := count(t, s); n != 0 {
		t.Errorf("Scan visited %d records, want 0 (the only one expired)", n)
	}

	fresh := newRecord(c, old.Key, "owner-2")
	mustCreate(t, s, fresh.Clone())
	wantGet(t, s, old.Key, fresh)
	if got, err := s.ByMessageID(bg, "smsc", "m-1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("ByMessageID(smsc, m-1) after the record was replaced = %+v, %v; want ErrNotFound", got, err)
	}
}

func testExtendExpiry(t *testing.T, s state.Store, c *Clock) {
	r := newRecord(c, state.Key{Account: "acme", Key: "k"}, "o")
	r.Expires = c.Now().Add(time.Minute)
	mustCreate(t, s, r.Clone())
	want := mustUpdate(t, s, r.Key, func(r *state.Record) { r.Expires = r.Expires.Add(time.Hour) })
	c.Advance(2 * time.Minute)
	wantGet(t, s, r.Key, want)
}

func testByMessageID(t *testing.T, s state.Store, c *Clock) {
	k := state.Key{Account: "acme", Key: "k"}
	mustCreate(t, s, newRecord(c, k, "o"))
	lookup := func(up, id string, want *state.Record) {
		t.Helper()
		got, err := s.ByMessageID(bg, up, id)
		if want == nil && !errors.Is(err, state.ErrNotFound) || want != nil && (err != nil || !same(got, want)) {
			t.Errorf("ByMessageID(%q, %q) = %+v, %v; want %+v (nil: ErrNotFound)", up, id, got, err, want)
		}
	}
	lookup("smsc-a", "", nil)
	accepted := mustUpdate(t, s, k, func(r *state.Record) {
		r.State, r.Upstream, r.MessageID = state.Accepted, "smsc-a", "m-1"
	})
	lookup("smsc-a", "m-1", accepted)
	lookup("smsc-b", "m-1", nil)
	lookup("smsc-a", "m-2", nil)

	moved := mustUpdate(t, s, k, func(r *state.Record) { r.MessageID = "m-2" })
	lookup("smsc-a", "m-1", nil)
	lookup("smsc-a", "m-2", moved)
	moved = mustUpdate(t, s, k, func(r *state.Record) { r.Upstream = "smsc-b" })
	lookup("smsc-a", "m-2", nil)
	lookup("smsc-b", "m-2", moved)
}

// The journal is the record's own fields: a record created journaled
// (before the PDU is written) carries that session and sequence, and each
// later journal (a resend on another session) replaces them, through
// Update and Replace alike.
func testLastJournal(t *testing.T, s state.Store, c *Clock) {
	k := state.Key{Account: "acme", Key: "k"}
	rec := newRecord(c, k, "o")
	rec.Upstream, rec.Session, rec.Sequence = "smsc", "smsc/1", 7
	mustCreate(t, s, rec.Clone())
	wantJournal(t, s, k, "smsc", "smsc/1", 7)

	resent := mustUpdate(t, s, k, func(r *state.Record) { r.Upstream, r.Session, r.Sequence = "smsc-b", "smsc-b/2", 1 })
	wantJournal(t, s, k, "smsc-b", "smsc-b/2", 1)
	next := resent.Clone()
	next.Session, next.Sequence = "smsc-b/3", 0
	mustReplace(t, s, resent, next)
	wantJournal(t, s, k, "smsc-b", "smsc-b/3", 0)
	mustUpdate(t, s, k, func(r *state.Record) { r.Upstream, r.Session, r.Sequence = "", "", 0 })
	wantJournal(t, s, k, "", "", 0)
}

// An index entry that a second record took over must survive the first
// record moving away from it.
func testIndexTakenOver(t *testing.T, s state.Store, c *Clock) {
	a := newRecord(c, state.Key{Account: "acme", Key: "a"}, "o")
	a.Upstream, a.Session, a.Sequence, a.MessageID = "smsc", "smsc/1", 5, "m-5"
	mustCreate(t, s, a.Clone())
	b := newRecord(c, state.Key{Account: "acme", Key: "b"}, "o")
	b.Upstream, b.Session, b.Sequence, b.MessageID = "smsc", "smsc/1", 5, "m-5"
	mustCreate(t, s, b.Clone())
	mustUpdate(t, s, a.Key, func(r *state.Record) { r.Session, r.Sequence, r.MessageID = "smsc/2", 9, "m-9" })

	if got, err := s.ByMessageID(bg, "smsc", "m-5"); err != nil || got.Key != b.Key {
		t.Errorf("ByMessageID(smsc, m-5) = %+v, %v; want record %v", got, err, b.Key)
	}
	if got, err := s.ByMessageID(bg, "smsc", "m-9"); err != nil || got.Key != a.Key {
		t.Errorf("ByMessageID(smsc, m-9) = %+v, %v; want record %v", got, err, a.Key)
	}
	wantJournal(t, s, b.Key, "smsc", "smsc/1", 5)
	wantJournal(t, s, a.Key, "smsc", "smsc/2", 9)
}

func count(t *testing.T, s state.Store) int {
	t.Helper()
	n := 0
	if err := s.Scan(bg, func(*state.Record) bool { n++; return true }); err != nil {
		t.Fatalf("Scan = %v", err)
	}
	return n
}

func testScan(t *testing.T, s state.Store, c *Clock) {
	live := map[state.Key]bool{}
	for i := range 20 {
		r := newRecord(c, state.Key{Account: "acme", Key: fmt.Sprintf("k%02d", i)}, "o")
		if i%4 == 0 {
			r.Expires = c.Now().Add(time.Minute) // expired below
		} else {
			live[r.Key] = true
		}
		mustCreate(t, s, r)
	}
	c.Advance(time.Minute)
	seen := map[state.Key]bool{}
	err := s.Scan(bg, func(r *state.Record) bool {
		if seen[r.Key] || !live[r.Key] {
			t.Errorf("Scan visited %v (seen before: %v); want each live record once", r.Key, seen[r.Key])
		}
		seen[r.Key] = true
		return true
	})
	if err != nil || len(seen) != len(live) {
		t.Errorf("Scan = %v after visiting %d records; want nil after %d", err, len(seen), len(live))
	}
	calls := 0
	if err := s.Scan(bg, func(*state.Record) bool { calls++; return calls < 3 }); err != nil || calls != 3 {
		t.Errorf("Scan stopping at the 3rd record = %v after %d calls; want nil after 3", err, calls)
	}
}
