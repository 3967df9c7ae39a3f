package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// submitted is the record of a fresh submit as the proxy creates it: Sent,
// journaled on session smsc/1 with seq, with a proxy id and addresses.
func submitted(c *Clock, key string, seq uint32) *state.Record {
	r := newRecord(c, state.Key{Account: "acme", Key: key}, "owner-1")
	r.Upstream, r.Session, r.Sequence = "smsc", "smsc/1", seq
	r.ProxyID = "p-" + key
	r.AddrHash = state.HashAddrs([]byte("SHOP"), []byte(key))
	r.History = []state.Event{{At: c.Now(), State: state.Sent, Note: "created"}}
	return r
}

// accepted is the outcome write of r: Accepted with message id id.
func accepted(c *Clock, r *state.Record, id string) *state.Record {
	n := r.Clone()
	n.State, n.MessageID, n.Updated = state.Accepted, id, c.Now()
	n.History = append(n.History, state.Event{At: c.Now(), State: state.Accepted, MessageID: id, Session: r.Session, Sequence: r.Sequence})
	return n
}

func mustReplace(t *testing.T, s state.Store, old, rec *state.Record) {
	t.Helper()
	if err := s.Replace(bg, old, rec); err != nil {
		t.Fatalf("Replace(%v) = %v; want nil", rec.Key, err)
	}
}

// sentKeys returns the keys ScanState(Sent) visits, sorted.
func sentKeys(t *testing.T, s state.Store) []string {
	t.Helper()
	var keys []string
	err := s.ScanState(bg, state.Sent, func(r *state.Record) bool {
		if r.State != state.Sent {
			t.Errorf("ScanState(Sent) visited %v in state %s", r.Key, r.State)
		}
		keys = append(keys, r.Key.Key)
		return true
	})
	if err != nil {
		t.Errorf("ScanState(Sent) = %v", err)
	}
	slices.Sort(keys)
	return keys
}

// The submit's two writes: Create with the journal, then the outcome by
// Replace. Get, the indexes and ScanState see the outcome, and the record
// keeps the session and sequence it was journaled with.
func testReplaceOwnedWrite(t *testing.T, s state.Store, c *Clock) {
	rec := submitted(c, "k1", 7)
	mustCreate(t, s, rec.Clone())
	if got := sentKeys(t, s); !slices.Equal(got, []string{"k1"}) {
		t.Errorf("ScanState(Sent) after Create = %v; want [k1]", got)
	}
	c.Advance(time.Second)
	out := accepted(c, rec, "m-1")
	mustReplace(t, s, rec, out.Clone())
	wantGet(t, s, rec.Key, out)
	if got, err := s.ByMessageID(bg, "smsc", "m-1"); err != nil || !same(got, out) {
		t.Errorf("ByMessageID(smsc, m-1) = %+v, %v; want the replaced record", got, err)
	}
	wantJournal(t, s, rec.Key, "smsc", "smsc/1", 7)
	if got, err := s.ByProxyID(bg, "acme", "p-k1"); err != nil || !same(got, out) {
		t.Errorf("ByProxyID(acme, p-k1) = %+v, %v; want the replaced record", got, err)
	}
	if got := sentKeys(t, s); len(got) != 0 {
		t.Errorf("ScanState(Sent) after the outcome = %v; want nothing", got)
	}
	if h, ok := s.(state.HotReader); ok {
		want := out.Clone()
		want.History = nil
		if got, err := h.GetHot(bg, rec.Key); err != nil || got.History != nil || !same(got, want) {
			t.Errorf("GetHot(%v) = %+v, %v; want the record without history", rec.Key, got, err)
		}
	}
	// Update after Replace sees (and keeps) the whole history.
	got := mustUpdate(t, s, rec.Key, func(r *state.Record) {
		r.History = append(r.History, state.Event{At: c.Now(), State: r.State, Note: "receipt"})
	})
	if len(got.History) != 3 || got.History[2].Note != "receipt" || !same(&state.Record{History: got.History[:2]}, &state.Record{History: out.History}) {
		t.Errorf("Update after Replace stored history %+v; want the 2 events before and the receipt", got.History)
	}
	if err := s.Replace(bg, rec, &state.Record{Key: state.Key{Account: "acme", Key: "other"}}); err == nil {
		t.Errorf("Replace of %v by another key = nil; want an error", rec.Key)
	}
	wantGet(t, s, state.Key{Account: "acme", Key: "other"}, nil)
}

// Index entries the old version had and the new one has not are gone;
// the record carries its new journal, and another record journaled on the
// session and sequence it had keeps its own.
func testReplaceIndexRemoval(t *testing.T, s state.Store, c *Clock) {
	rec := submitted(c, "k1", 7)
	rec.State, rec.MessageID = state.Unknown, "m-1"
	mustCreate(t, s, rec.Clone())
	if got, err := s.UnknownByAddr(bg, "smsc", rec.AddrHash); err != nil || len(got) != 1 {
		t.Fatalf("UnknownByAddr = %v, %v; want the record", got, err)
	}
	// Another record is journaled on smsc/1#7 too.
	thief := submitted(c, "k2", 7)
	mustCreate(t, s, thief.Clone())

	next := rec.Clone()
	next.State, next.MessageID, next.Session, next.Sequence, next.ProxyID = state.Accepted, "m-2", "smsc/2", 9, ""
	mustReplace(t, s, rec, next)
	for what, err := range map[string]error{
		"ByMessageID(m-1)": second(s.ByMessageID(bg, "smsc", "m-1")),
		"ByProxyID(p-k1)":  second(s.ByProxyID(bg, "acme", "p-k1")),
	} {
		if !errors.Is(err, state.ErrNotFound) {
			t.Errorf("%s after Replace dropped it = %v; want ErrNotFound", what, err)
		}
	}
	if got, err := s.UnknownByAddr(bg, "smsc", rec.AddrHash); err != nil || len(got) != 0 {
		t.Errorf("UnknownByAddr after Replace to Accepted = %v, %v; want nothing", got, err)
	}
	if got, err := s.ByMessageID(bg, "smsc", "m-2"); err != nil || got.Key != rec.Key {
		t.Errorf("ByMessageID(m-2) = %+v, %v; want %v", got, err, rec.Key)
	}
	wantJournal(t, s, rec.Key, "smsc", "smsc/2", 9)
	wantJournal(t, s, thief.Key, "smsc", "smsc/1", 7)
}

func second[T any](_ T, err error) error { return err }

// Replace appends the new events to the stored history and keeps it
// within MaxHistory (the first event and the latest), whether or not the
// caller trims; a history that is not an extension replaces it.
func testReplaceHistory(t *testing.T, s state.Store, c *Clock) {
	for _, trim := range []bool{false, true} {
		rec := submitted(c, fmt.Sprintf("trim-%v", trim), 1)
		mustCreate(t, s, rec.Clone())
		all := slices.Clone(rec.History)
		cur := rec
		for i := range 2*state.MaxHistory + 5 {
			c.Advance(time.Millisecond)
			next := cur.Clone()
			ev := state.Event{At: c.Now(), State: state.Unknown, Sequence: uint32(i), Note: fmt.Sprintf("event %d", i)}
			next.History = append(next.History, ev)
			all = append(all, ev)
			if trim && len(next.History) > state.MaxHistory {
				next.History = append(next.History[:1], next.History[len(next.History)-state.MaxHistory+1:]...)
			}
			mustReplace(t, s, cur, next)
			cur = next
		}
		want := append([]state.Event{all[0]}, all[len(all)-state.MaxHistory+1:]...)
		got, err := s.Get(bg, rec.Key)
		if err != nil || !same(&state.Record{History: got.History}, &state.Record{History: want}) {
			t.Errorf("trim=%v: history after %d events = %d events (%v); want the first and the latest %d", trim, len(all), len(got.History), err, state.MaxHistory-1)
		}
	}
	// A history that does not extend the old one replaces it.
	rec := submitted(c, "rewrite", 1)
	mustCreate(t, s, rec.Clone())
	next := rec.Clone()
	next.History = []state.Event{{At: c.Now().Add(time.Hour), State: state.Sent, Note: "renewed"}}
	mustReplace(t, s, rec, next)
	wantGet(t, s, rec.Key, next)
	next2 := next.Clone()
	next2.History = append(next2.History, state.Event{At: c.Now().Add(2 * time.Hour), State: state.Accepted})
	mustReplace(t, s, next, next2)
	wantGet(t, s, rec.Key, next2)
	// One that inserts an event among the old ones is no extension either:
	// [a b] becoming [a x b c] is stored as it is, x kept.
	ab := submitted(c, "insert", 1)
	ab.History = append(ab.History, state.Event{At: c.Now().Add(time.Minute), State: state.Sent, Note: "b"})
	mustCreate(t, s, ab.Clone())
	axbc := ab.Clone()
	axbc.History = []state.Event{ab.History[0], {At: c.Now().Add(time.Second), State: state.Sent, Note: "x"}, ab.History[1],
		{At: c.Now().Add(2 * time.Minute), State: state.Accepted, Note: "c"}}
	mustReplace(t, s, ab, axbc)
	wantGet(t, s, ab.Key, axbc)
}

// Update and Create keep histories within MaxHistory too.
func testHistoryCap(t *testing.T, s state.Store, c *Clock) {
	rec := submitted(c, "long", 1)
	for i := range state.MaxHistory + 10 {
		rec.History = append(rec.History, state.Event{At: c.Now(), Note: fmt.Sprintf("e%d", i)})
	}
	mustCreate(t, s, rec.Clone())
	got, err := s.Get(bg, rec.Key)
	if err != nil || len(got.History) != state.MaxHistory || got.History[0].Note != "created" || got.History[state.MaxHistory-1].Note != rec.History[len(rec.History)-1].Note {
		t.Fatalf("Get after Create with %d events = %d events, %v; want the first and the latest %d", len(rec.History), len(got.History), err, state.MaxHistory-1)
	}
	got = mustUpdate(t, s, rec.Key, func(r *state.Record) {
		r.History = append(r.History, state.Event{At: c.Now(), Note: "last"})
	})
	again, err := s.Get(bg, rec.Key)
	if err != nil || len(got.History) != state.MaxHistory || got.History[0].Note != "created" || got.History[state.MaxHistory-1].Note != "last" || !same(got, again) {
		t.Errorf("Update appending to a full history = %d events (first %q, last %q), Get %v; want %d, created … last, as stored",
			len(got.History), got.History[0].Note, got.History[len(got.History)-1].Note, err, state.MaxHistory)
	}
}

// ScanState visits exactly the live records in the state asked for.
func testScanState(t *testing.T, s state.Store, c *Clock) {
	for i, st := range []state.SubmitState{state.Sent, state.Accepted, state.Sent, state.Unknown, state.Sent} {
		r := submitted(c, fmt.Sprintf("k%d", i), uint32(i))
		r.State = st
		if i == 4 {
			r.Expires = c.Now().Add(time.Minute)
		}
		mustCreate(t, s, r)
	}
	mustUpdate(t, s, state.Key{Account: "acme", Key: "k2"}, func(r *state.Record) { r.State = state.Retryable })
	mustUpdate(t, s, state.Key{Account: "acme", Key: "k1"}, func(r *state.Record) { r.State = state.Sent })
	c.Advance(time.Minute)
	if got := sentKeys(t, s); !slices.Equal(got, []string{"k0", "k1"}) {
		t.Errorf("ScanState(Sent) = %v; want [k0 k1]", got)
	}
	var unknown []string
	if err := s.ScanState(bg, state.Unknown, func(r *state.Record) bool { unknown = append(unknown, r.Key.Key); return true }); err != nil || !slices.Equal(unknown, []string{"k3"}) {
		t.Errorf("ScanState(Unknown) = %v, %v; want [k3]", unknown, err)
	}
	calls := 0
	if err := s.ScanState(bg, state.Sent, func(*state.Record) bool { calls++; return false }); err != nil || calls != 1 {
		t.Errorf("ScanState stopping at the first record = %v after %d calls; want nil after 1", err, calls)
	}
	// A Sent record that expired and is created again is visited once.
	r := submitted(c, "k4", 4)
	mustCreate(t, s, r)
	if got := sentKeys(t, s); !slices.Equal(got, []string{"k0", "k1", "k4"}) {
		t.Errorf("ScanState(Sent) after re-creating k4 = %v; want [k0 k1 k4]", got)
	}
}

// Many submits at once, each a Create and a Replace, with duplicates
// racing the creates: exactly one creator per key, and every outcome
// stored.
func testSubmitsConcurrent(t *testing.T, s state.Store, c *Clock) {
	const keys, dups = 64, 3
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins = map[string]int{}
	)
	for i := range keys * dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i%keys)
			rec := submitted(c, key, uint32(i%keys))
			rec.Owner = fmt.Sprintf("owner-%d", i)
			_, created, err := s.Create(bg, rec.Clone())
			if err != nil || !created {
				if err != nil {
					t.Errorf("Create(%s) = %v", key, err)
				}
				return
			}
			mu.Lock()
			wins[key]++
			mu.Unlock()
			if err := s.Replace(bg, rec, accepted(c, rec, "m-"+key)); err != nil {
				t.Errorf("Replace(%s) = %v", key, err)
			}
		}()
	}
	wg.Wait()
	for i := range keys {
		key := fmt.Sprintf("k%d", i)
		if wins[key] != 1 {
			t.Errorf("%s was created %d times; want once", key, wins[key])
		}
		got, err := s.ByMessageID(bg, "smsc", "m-"+key)
		if err != nil || got.State != state.Accepted || len(got.History) != 2 {
			t.Errorf("ByMessageID(m-%s) = %+v, %v; want the accepted record with 2 events", key, got, err)
		}
	}
	if got := sentKeys(t, s); len(got) != 0 {
		t.Errorf("ScanState(Sent) after every outcome = %v; want nothing", got)
	}
}

// testCountStates: a store that counts its records by state itself
// (state.StateCounter, behind the records-by-state metrics) counts what a
// Scan visits, long histories and expiry included, up to its limit.
func testCountStates(t *testing.T, s state.Store, c *Clock) {
	sc, ok := s.(state.StateCounter)
	if !ok {
		t.Skip("the store does not count its records by state itself")
	}
	for i, st := range []state.SubmitState{state.Sent, state.Accepted, state.Accepted, state.Unknown, state.Rejected, state.Accepted} {
		r := submitted(c, fmt.Sprintf("k%d", i), uint32(i))
		r.State = st
		if i == 5 {
			r.Expires = c.Now().Add(time.Minute) // expires before the count
		}
		mustCreate(t, s, r)
	}
	// A history longer than what a record keeps with it.
	for i := range 12 {
		mustUpdate(t, s, state.Key{Account: "acme", Key: "k1"}, func(r *state.Record) {
			r.History = append(r.History, state.Event{At: c.Now(), State: state.Accepted, Note: fmt.Sprint("receipt ", i)})
		})
	}
	mustUpdate(t, s, state.Key{Account: "acme", Key: "k0"}, func(r *state.Record) { r.State = state.Retryable })
	c.Advance(time.Minute)

	want := map[state.SubmitState]int{}
	if err := s.Scan(bg, func(r *state.Record) bool { want[r.State]++; return true }); err != nil {
		t.Fatal(err)
	}
	if len(want) != 4 || want[state.Accepted] != 2 {
		t.Fatalf("Scan counted %v; want 5 live records in 4 states", want)
	}
	for _, limit := range []int{math.MaxInt, 100, 5} {
		got, complete, err := sc.CountStates(bg, limit)
		if err != nil || !complete || !maps.Equal(got, want) {
			t.Errorf("CountStates(%d) = %v, %v, %v; want %v, complete", limit, got, complete, err, want)
		}
	}
	got, complete, err := sc.CountStates(bg, 3)
	n := 0
	for st, k := range got {
		n += k
		if k > want[st] {
			t.Errorf("CountStates(3) counted %d %s records; there are %d", k, st, want[st])
		}
	}
	if err != nil || complete || n != 3 {
		t.Errorf("CountStates(3) over 5 live records = %v, %v, %v; want 3 counted, not complete", got, complete, err)
	}
}
