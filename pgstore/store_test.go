package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// sentRecord is a fresh submit's record: sent, journaled on smsc/1#seq,
// with a proxy id and addresses, owned by owner.
func sentRecord(now time.Time, key, owner string, seq uint32) *state.Record {
	return &state.Record{
		Key: state.Key{Account: "acme", Key: key}, State: state.Sent, Owner: owner,
		Upstream: "smsc", Session: "smsc/1", Sequence: seq, ProxyID: "p-" + key,
		AddrHash: state.HashAddrs([]byte("SHOP"), []byte(key)),
		Created:  now, Updated: now, Expires: now.Add(time.Hour),
		History: []state.Event{{At: now, State: state.Sent, Note: "created"}},
	}
}

func mustCreate(t *testing.T, s *Store, r *state.Record) {
	t.Helper()
	if ex, created, err := s.Create(bg, r.Clone()); err != nil || !created {
		t.Fatalf("Create(%v) = %+v, %v, %v; want created", r.Key, ex, created, err)
	}
}

func mustGet(t *testing.T, s *Store, k state.Key) *state.Record {
	t.Helper()
	r, err := s.Get(bg, k)
	if err != nil {
		t.Fatalf("Get(%v) = %v", k, err)
	}
	return r
}

func notes(h []state.Event) []string {
	var out []string
	for _, e := range h {
		out = append(out, e.Note)
	}
	return out
}

// Replace writes the owner's next version without reading: the index
// entries the old version had and the new one has not are gone, and the
// new events are appended to the history as stored, even when it holds
// events the caller's old version does not show.
func TestReplaceAppendsToStoredHistoryAndMovesIndexes(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	old := sentRecord(c.Now(), "k1", "test-1/1", 7)
	mustCreate(t, s, old)
	// Someone else adds an event the owner's copy does not show.
	if _, err := s.Update(bg, old.Key, func(r *state.Record) error {
		r.History = append(r.History, state.Event{At: c.Now(), State: state.Sent, Note: "observed"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	next := old.Clone()
	next.State, next.MessageID, next.Session, next.Sequence, next.ProxyID = state.Accepted, "m-1", "smsc/2", 9, ""
	next.History = append(next.History, state.Event{At: c.Now(), State: state.Accepted, MessageID: "m-1", Note: "accepted"})
	if err := s.Replace(bg, old, next); err != nil {
		t.Fatalf("Replace = %v", err)
	}
	got := mustGet(t, s, old.Key)
	if got.State != state.Accepted || got.MessageID != "m-1" || got.Session != "smsc/2" || got.Sequence != 9 || !slices.Equal(notes(got.History), []string{"created", "observed", "accepted"}) {
		t.Errorf("after Replace Get = %s %q on %q #%d history %q; want accepted m-1 on smsc/2 #9 with [created observed accepted]", got.State, got.MessageID, got.Session, got.Sequence, notes(got.History))
	}
	if _, err := s.ByProxyID(bg, "acme", "p-k1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("ByProxyID(dropped proxy id) = %v; want ErrNotFound", err)
	}
	if r, err := s.ByMessageID(bg, "smsc", "m-1"); err != nil || r.Key != old.Key {
		t.Errorf("ByMessageID(smsc, m-1) = %v, %v; want %v", r, err, old.Key)
	}
	if err := s.Replace(bg, old, sentRecord(c.Now(), "other", "x/1", 1)); err == nil {
		t.Errorf("Replace by a record of another key = nil; want an error")
	}
}

// A Replace of a record whose row is gone (collected after expiry)
// writes it anew, history and all.
func TestReplaceOfAMissingRecordWritesIt(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	old := sentRecord(c.Now(), "gone", "test-1/1", 1)
	next := old.Clone()
	next.State = state.Accepted
	next.History = append(next.History, state.Event{At: c.Now(), State: state.Accepted, Note: "accepted"})
	if err := s.Replace(bg, old, next); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, old.Key); got.State != state.Accepted || !slices.Equal(notes(got.History), []string{"created", "accepted"}) {
		t.Errorf("Get = %s %q; want accepted [created accepted]", got.State, notes(got.History))
	}
}

// Histories are kept to the first event and the latest ones, on Create,
// Update and Replace alike.
func TestHistoryKeepsFirstAndLatestEvents(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	r := sentRecord(c.Now(), "long", "test-1/1", 1)
	for i := range maxHistory + 5 {
		r.History = append(r.History, state.Event{At: c.Now(), Note: fmt.Sprintf("e%d", i)})
	}
	mustCreate(t, s, r)
	got := mustGet(t, s, r.Key)
	if len(got.History) != maxHistory || got.History[0].Note != "created" || got.History[maxHistory-1].Note != fmt.Sprintf("e%d", maxHistory+4) {
		t.Fatalf("after Create with %d events: %d kept, first %q last %q", len(r.History), len(got.History), got.History[0].Note, got.History[len(got.History)-1].Note)
	}
	cur := got
	for i := range 3 {
		next := cur.Clone()
		next.History = append(next.History, state.Event{At: c.Now(), Note: fmt.Sprintf("r%d", i)})
		if err := s.Replace(bg, cur, next); err != nil {
			t.Fatal(err)
		}
		cur = next
	}
	got = mustGet(t, s, r.Key)
	if len(got.History) != maxHistory || got.History[0].Note != "created" || got.History[maxHistory-1].Note != "r2" || got.History[maxHistory-2].Note != "r1" {
		t.Errorf("after 3 Replaces: %d kept, first %q, last two %q; want %d, created, … r1 r2", len(got.History), got.History[0].Note, notes(got.History[len(got.History)-2:]), maxHistory)
	}
}

// ScanState visits exactly the live records in the state asked for.
func TestScanStateVisitsLiveRecordsOfOneState(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	for i, st := range []state.SubmitState{state.Sent, state.Accepted, state.Sent, state.Unknown, state.Sent} {
		r := sentRecord(c.Now(), fmt.Sprintf("k%d", i), "test-1/1", uint32(i))
		r.State = st
		if i == 4 {
			r.Expires = c.Now().Add(time.Minute)
		}
		mustCreate(t, s, r)
	}
	c.Advance(time.Minute)
	visit := func(st state.SubmitState) []string {
		var keys []string
		if err := s.ScanState(bg, st, func(r *state.Record) bool { keys = append(keys, r.Key.Key); return true }); err != nil {
			t.Fatalf("ScanState(%s) = %v", st, err)
		}
		slices.Sort(keys)
		return keys
	}
	if got := visit(state.Sent); !slices.Equal(got, []string{"k0", "k2"}) {
		t.Errorf("ScanState(sent) = %v; want [k0 k2] (k4 expired)", got)
	}
	if got := visit(state.Unknown); !slices.Equal(got, []string{"k3"}) {
		t.Errorf("ScanState(unknown) = %v; want [k3]", got)
	}
	if got := visit(state.Rejected); len(got) != 0 {
		t.Errorf("ScanState(rejected) = %v; want nothing", got)
	}
}

// Scan pages through more records than one query returns, each once.
func TestScanPagesThroughEveryRecord(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	const n = scanPage*2 + 17
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := s.Create(bg, sentRecord(c.Now(), fmt.Sprintf("k%05d", i), "test-1/1", uint32(i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	err := s.Scan(bg, func(r *state.Record) bool {
		if seen[r.Key.Key] {
			t.Errorf("Scan visited %s twice", r.Key.Key)
		}
		seen[r.Key.Key] = true
		return true
	})
	if err != nil || len(seen) != n {
		t.Errorf("Scan = %v after %d records; want nil after %d", err, len(seen), n)
	}
}

// Two stores (two pools, as two proxy instances) creating one key at
// once: exactly one creates it, and every other creator is shown the
// winner's record.
func TestConcurrentCreateAcrossInstancesHasOneWinner(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b"})
	now := time.Now()
	for round := range 5 {
		key := fmt.Sprintf("race-%d", round)
		const n = 32
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			wins   []string
			owners = map[string]bool{}
		)
		start := make(chan struct{})
		for i := range n {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				me := fmt.Sprintf("%s/%d", s.opts.InstanceID, i)
				<-start
				ex, created, err := s.Create(bg, sentRecord(now, key, me, uint32(i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("Create by %s: %v", me, err)
				case created:
					wins = append(wins, me)
				default:
					owners[ex.Owner] = true
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("round %d: %d creators won (%v); want exactly 1", round, len(wins), wins)
		}
		if len(owners) != 1 || !owners[wins[0]] {
			t.Errorf("round %d: losers saw owners %v; want only the winner %s", round, owners, wins[0])
		}
	}
}

// tailQueue reads queue as a consumer with a cursor does (List after the
// last sequence number seen, limit at a time) until done is closed and a
// List after that finds nothing more, and returns every entry it read.
func tailQueue(t *testing.T, s *Store, queue string, limit int, done <-chan struct{}) []*state.QueueEntry {
	t.Helper()
	var read []*state.QueueEntry
	var after uint64
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		es, err := s.List(bg, queue, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			read = append(read, e)
			after = e.Seq
		}
		if finished && len(es) == 0 {
			return read
		}
	}
}

// Entries enqueued by two instances at once reach a consumer that tails
// the queue with a cursor (List after the last sequence number it saw)
// without one being skipped: sequence numbers commit in order.
func TestQueueCursorMissesNothingAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b"})
	const per = 200
	now := time.Now()
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per / 8 {
					e := &state.QueueEntry{Queue: "shop", MessageID: fmt.Sprintf("%s-%d-%d", s.opts.InstanceID, w, i), Body: []byte("b"), Enqueued: now, Expires: now.Add(time.Hour)}
					if _, _, err := s.Enqueue(bg, e); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[string]bool{}
	for _, e := range tailQueue(t, b, "shop", 50, done) {
		seen[e.MessageID] = true
	}
	if len(seen) != 2*per {
		t.Errorf("a consumer tailing the queue saw %d of %d entries", len(seen), 2*per)
	}
}
