package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// countingStore counts the durable writes the engine asks of its store.
type countingStore struct {
	state.Store
	writes, reads, updates atomic.Int64 // updates: read-modify-writes among the writes
}

func (s *countingStore) Get(ctx context.Context, k state.Key) (*state.Record, error) {
	s.reads.Add(1)
	return s.Store.Get(ctx, k)
}

func (s *countingStore) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	s.writes.Add(1)
	return s.Store.Create(ctx, rec)
}

func (s *countingStore) Replace(ctx context.Context, old, rec *state.Record) error {
	s.writes.Add(1)
	return s.Store.Replace(ctx, old, rec)
}

func (s *countingStore) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	s.writes.Add(1)
	s.updates.Add(1)
	return s.Store.Update(ctx, k, fn)
}

func TestFreshSubmitCostsTwoWritesAndItsRetryNeitherWriteNorRead(t *testing.T) {
	st := &countingStore{Store: state.NewMem(nil)}
	f := &fakeForwarder{}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "w"})

	first := e.Submit(ctx, "shop", Policy{}, submit(t, "k-two", "hello"))
	if first.Outcome != OutForwarded {
		t.Fatalf("first submit = %s, want forwarded", first.Outcome)
	}
	if n := st.writes.Load(); n != 2 {
		t.Errorf("a fresh submit asked the store for %d writes, want 2 (create carrying the journal, then the outcome)", n)
	}
	if n := st.updates.Load(); n != 0 {
		t.Errorf("a fresh submit made %d read-modify-writes, want 0: the outcome of a record it created is a blind replacement", n)
	}
	r, err := st.Get(ctx, state.Key{Account: "shop", Key: KeyOfTLV([]byte("k-two"))})
	if err != nil || r.State != state.Accepted || r.Session != "up/s1" || r.Sequence != 1 {
		t.Fatalf("record after the submit = %+v, %v; want accepted, journaled on up/s1 sequence 1", r, err)
	}
	st.writes.Store(0)
	st.reads.Store(0)
	again := e.Submit(ctx, "shop", Policy{}, submit(t, "k-two", "hello"))
	if again.Outcome != OutReplayed || again.MessageID != first.MessageID {
		t.Errorf("retry = {%s %q}, want replayed with %q", again.Outcome, again.MessageID, first.MessageID)
	}
	if n := st.writes.Load(); n != 0 || f.count() != 1 {
		t.Errorf("a retry of an accepted key asked for %d writes and made %d forwards in all, want 0 writes and 1 forward", n, f.count())
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("a retry of a key this engine just settled read the store %d times, want 0 (answered from memory)", n)
	}
}

// lateCreator creates the record under the key itself just before the
// engine's create, as a second instance sharing the store would.
type lateCreator struct {
	state.Store
	other *state.Record
	once  atomic.Bool
}

func (s *lateCreator) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	if s.once.CompareAndSwap(false, true) {
		o := s.other
		o.Key = rec.Key
		if _, _, err := s.Store.Create(ctx, o); err != nil {
			return nil, false, err
		}
	}
	return s.Store.Create(ctx, rec)
}

func TestKeyCreatedByAnotherWriterBeforeTheJournalIsAnsweredByItsRecord(t *testing.T) {
	sub := submit(t, "k-race", "hello")
	probe := New(Config{Store: state.NewMem(nil), Forwarder: &fakeForwarder{}, InstanceID: "probe"})
	defer probe.Close()
	fp := sub.FingerprintWith(sub.Segment(), probe.cfg.Secret.MAC())
	now := probe.now()
	other := &state.Record{
		Fingerprint: fp, FingerprintVersion: state.FingerprintHMAC, State: state.Accepted, Owner: "elsewhere",
		MessageID: "from-B", Created: now, Updated: now, Expires: now.Add(flightGuard),
	}
	st := &lateCreator{Store: state.NewMem(nil), other: other}
	f := &fakeForwarder{}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "A", Secret: probe.cfg.Secret})
	a := e.Submit(ctx, "shop", Policy{}, sub)
	if f.count() != 0 {
		t.Errorf("forwards written = %d, want 0: the key was taken before the journal", f.count())
	}
	if a.Status != 0 || a.MessageID != "from-B" || a.Outcome != OutReplayed {
		t.Errorf("answer = {%v %q %s}, want the other writer's {0 from-B replayed}", a.Status, a.MessageID, a.Outcome)
	}
}

func TestRememberedSettledRecordIsNotReplayedPastItsRetention(t *testing.T) {
	f := &fakeForwarder{}
	e, _, clk := newEngine(t, f)
	p := Policy{Retention: time.Hour}
	first := e.Submit(ctx, "shop", p, submit(t, "k-ret", "hello"))
	clk.Advance(2 * time.Hour)
	again := e.Submit(ctx, "shop", p, submit(t, "k-ret", "hello"))
	if again.Outcome != OutForwarded || again.MessageID == first.MessageID || f.count() != 2 {
		t.Errorf("submit after the retention = {%s %q} with %d forwards, want a new operation (forwarded, new id, 2 forwards)", again.Outcome, again.MessageID, f.count())
	}
}

func TestFinalsForgetTheOldestBeyondTheirCapacity(t *testing.T) {
	f := newFinals(2)
	rec := func(k string) *state.Record {
		return &state.Record{Key: state.Key{Account: "a", Key: k}, State: state.Accepted, MessageID: k, History: []state.Event{{Note: "x"}}}
	}
	f.put(rec("1"))
	f.put(rec("2"))
	f.put(&state.Record{Key: state.Key{Account: "a", Key: "s"}, State: state.Sent}) // not settled: not kept
	f.put(rec("3"))
	if remembered(f, state.Key{Account: "a", Key: "1"}) != nil {
		t.Error("the oldest entry is still remembered beyond the capacity")
	}
	if remembered(f, state.Key{Account: "a", Key: "s"}) != nil {
		t.Error("a sent record was remembered")
	}
	r := remembered(f, state.Key{Account: "a", Key: "3"})
	if r == nil || remembered(f, state.Key{Account: "a", Key: "2"}) == nil {
		t.Fatal("the two newest settled records are not remembered")
	}
	if r.MessageID != "3" || len(f.m) != 2 {
		t.Errorf("remembered %q, %d entries; want message id 3, 2 entries", r.MessageID, len(f.m))
	}
}

// A key forgotten (its record replaced) and remembered again keeps its
// new entry when the ring reuses the slot it had before.
func TestFinalsKeepAKeyRememberedAgainAfterItWasForgotten(t *testing.T) {
	f := newFinals(2)
	a := state.Key{Account: "a", Key: "a"}
	f.put(&state.Record{Key: a, State: state.Accepted, MessageID: "1"})
	f.forget(a)
	f.put(&state.Record{Key: a, State: state.Accepted, MessageID: "2"})
	f.put(&state.Record{Key: state.Key{Account: "a", Key: "b"}, State: state.Accepted}) // reuses a's first slot
	if r := remembered(f, a); r == nil || r.MessageID != "2" {
		t.Errorf("remembered record of a = %+v, want the one put after it was forgotten (message id 2)", r)
	}
}

// vanishing answers the engine's first two lookups "not found", and
// before the second one moves the store's clock past the expiry of the
// record another writer created meanwhile (lateCreator): the engine's
// first create loses the race, its second attempt finds the key free.
type vanishing struct {
	lateCreator
	clk  *testkit.Clock
	hide atomic.Int32 // Gets still to answer ErrNotFound
}

func (s *vanishing) Get(ctx context.Context, k state.Key) (*state.Record, error) {
	switch n := s.hide.Add(-1); {
	case n == 0:
		s.clk.Advance(time.Minute) // the other writer's record expires
		fallthrough
	case n > 0:
		return nil, state.ErrNotFound
	}
	return s.lateCreator.Get(ctx, k)
}

func (s *vanishing) GetHot(ctx context.Context, k state.Key) (*state.Record, error) {
	return s.Get(ctx, k)
}

// Create: the other writer's record, found by the engine's first create,
// expires right after (the engine must not answer by it then).
func (s *vanishing) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	found, created, err := s.lateCreator.Create(ctx, rec)
	if !created && found != nil {
		s.clk.Advance(time.Minute)
	}
	return found, created, err
}

func TestASecondNewAttemptAfterALostCreateRaceForwards(t *testing.T) {
	sub := submit(t, "k-again", "hello")
	clk := testkit.NewClock(time.Now())
	other := &state.Record{Owner: "elsewhere", State: state.Accepted, Created: clk.Now(), Expires: clk.Now().Add(time.Second)}
	st := &vanishing{lateCreator: lateCreator{Store: state.NewMem(clk.Now), other: other}, clk: clk}
	st.hide.Store(2)
	f := &fakeForwarder{}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "A", Now: clk.Now})
	a := e.Submit(ctx, "shop", Policy{}, sub)
	if a.Outcome != OutForwarded || f.count() != 1 {
		t.Errorf("answer = %s with %d forwards, want forwarded once (the second attempt won its create)", a.Outcome, f.count())
	}
}

// With CreateFirst (the shared store, where a read is a round trip), a
// fresh key is created without being read first, and a retry the engine
// does not remember is still answered by its record: replayed with the
// same message id, nothing sent again, also when no upstream can take it.
func TestCreateFirstSkipsTheReadOfAFreshKeyAndStillReplaysRetries(t *testing.T) {
	st := &countingStore{Store: state.NewMem(nil)}
	f := &fakeForwarder{}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "a", CreateFirst: true})
	secret := e.cfg.Secret

	first := e.Submit(ctx, "shop", Policy{}, submit(t, "k-cf", "hello"))
	if first.Outcome != OutForwarded || f.count() != 1 {
		t.Fatalf("first submit = %s after %d forwards, want forwarded once", first.Outcome, f.count())
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("a fresh key was read %d times before its create, want 0", n)
	}

	// Another engine on the same store remembers nothing: its create finds
	// the record, nothing is sent, and the record it found answers (not
	// read again).
	other := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "b", CreateFirst: true, Secret: secret})
	st.reads.Store(0)
	again := other.Submit(ctx, "shop", Policy{}, submit(t, "k-cf", "hello"))
	if n := st.reads.Load(); n != 0 {
		t.Errorf("the retry read the store %d times after its create found the record, want 0", n)
	}
	if again.Outcome != OutReplayed || again.MessageID != first.MessageID {
		t.Errorf("retry on another engine = {%s %q}, want replayed with %q", again.Outcome, again.MessageID, first.MessageID)
	}
	if f.count() != 1 {
		t.Errorf("the retry was sent upstream: %d forwards in all, want 1", f.count())
	}

	// No upstream takes anything (every bind down): a retry is answered by
	// its record all the same, and the record is not touched.
	down := &fakeFwd{Answer: func(context.Context, int, *Attempt) Result {
		return Result{Kind: NotSent, Status: smpp.StatusThrottled, Err: errors.New("no bind"), Upstream: "up"}
	}}
	third := newTestEngine(t, Config{Store: st, Forwarder: down, InstanceID: "c", CreateFirst: true, Secret: secret})
	if a := third.Submit(ctx, "shop", Policy{}, submit(t, "k-cf", "hello")); a.Outcome != OutReplayed || a.MessageID != first.MessageID {
		t.Errorf("retry with every upstream down = {%s %v %q}, want replayed with %q", a.Outcome, a.Status, a.MessageID, first.MessageID)
	}
	if r, err := st.Get(ctx, state.Key{Account: "shop", Key: KeyOfTLV([]byte("k-cf"))}); err != nil || r.State != state.Accepted || r.MessageID != first.MessageID {
		t.Errorf("record after the retries = %+v, %v; want still accepted with %q", r, err, first.MessageID)
	}
}

// With CreateFirst, a submit forwarded without a read takes only upstream
// capacity that is free at once (Attempt.NoWait): when every window is
// full, a retry of an accepted key is replayed at once by a read, without
// waiting for capacity or using it up, and a fresh key still waits for
// capacity as it always did, instead of being turned away.
func TestCreateFirstNeverWaitsForUpstreamCapacityBeforeReading(t *testing.T) {
	st := state.NewMem(nil)
	first := newTestEngine(t, Config{Store: st, Forwarder: &fakeForwarder{}, InstanceID: "a", CreateFirst: true})
	accepted := first.Submit(ctx, "shop", Policy{}, submit(t, "k-full", "hello"))
	if accepted.Outcome != OutForwarded {
		t.Fatalf("first submit = %s, want forwarded", accepted.Outcome)
	}

	// The upstream is full: an attempt with NoWait is turned away at once;
	// one without waits until capacity is freed (free), then is sent.
	free := make(chan struct{})
	var waited, sent atomic.Int64
	full := &fakeFwd{Answer: func(_ context.Context, n int, a *Attempt) Result {
		if a.NoWait {
			return Result{Kind: NotSent, Status: smpp.StatusThrottled, Err: errors.New("window full"), Upstream: "up"}
		}
		waited.Add(1)
		<-free
		if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
		}
		sent.Add(1)
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m-fresh", Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
	}}
	other := newTestEngine(t, Config{Store: st, Forwarder: full, InstanceID: "b", CreateFirst: true, Secret: first.cfg.Secret})

	if a := other.Submit(ctx, "shop", Policy{}, submit(t, "k-full", "hello")); a.Outcome != OutReplayed || a.MessageID != accepted.MessageID {
		t.Errorf("retry of an accepted key with the upstream full = {%s %v %q}, want replayed with %q at once", a.Outcome, a.Status, a.MessageID, accepted.MessageID)
	}
	if n := waited.Load(); n != 0 {
		t.Errorf("the retry of an accepted key waited for upstream capacity %d times, want 0", n)
	}

	done := make(chan Answer, 1)
	go func() { done <- other.Submit(ctx, "shop", Policy{}, submit(t, "k-new", "hello")) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return waited.Load() == 1 }, "a fresh key did not wait for upstream capacity")
	close(free)
	if a := <-done; a.Outcome != OutForwarded || a.MessageID != "m-fresh" || sent.Load() != 1 {
		t.Errorf("fresh key once capacity was freed = {%s %v %q}, %d sent; want forwarded as m-fresh, sent once", a.Outcome, a.Status, a.MessageID, sent.Load())
	}
}

// A pass of retries over keys the engine no longer remembers (each read
// from the store) does not push out the records it settled itself a
// moment ago: those are remembered apart, and the records read take a
// ring of their own.
func TestFinalsReadsDoNotPushOutTheRecordsTheEngineSettled(t *testing.T) {
	f := newFinalsOf(4, 2)
	key := func(p string, i int) state.Key { return state.Key{Account: "a", Key: fmt.Sprint(p, i)} }
	for i := range 4 {
		f.put(&state.Record{Key: key("settled", i), State: state.Accepted})
	}
	for i := range 10 {
		f.learn(&state.Record{Key: key("read", i), State: state.Accepted})
	}
	for i := range 4 {
		if remembered(f, key("settled", i)) == nil {
			t.Errorf("settled %d forgotten after 10 records read; want remembered", i)
		}
	}
	for i := range 10 {
		if got, want := remembered(f, key("read", i)) != nil, i >= 8; got != want {
			t.Errorf("read %d remembered = %v, want %v (the 2 latest reads)", i, got, want)
		}
	}
	if len(f.m) != 6 {
		t.Errorf("%d entries, want 6", len(f.m))
	}
}

// A key forgotten and remembered again in the other ring keeps its entry
// when its first ring reuses the slot it had there.
func TestFinalsKeepAKeyRememberedAgainInTheOtherRing(t *testing.T) {
	f := newFinalsOf(2, 2)
	a := state.Key{Account: "a", Key: "a"}
	f.put(&state.Record{Key: a, State: state.Accepted, MessageID: "1"})
	f.forget(a)
	f.learn(&state.Record{Key: a, State: state.Accepted, MessageID: "2"})
	f.put(&state.Record{Key: state.Key{Account: "a", Key: "b"}, State: state.Accepted})
	f.put(&state.Record{Key: state.Key{Account: "a", Key: "c"}, State: state.Accepted}) // reuses a's first slot
	if r := remembered(f, a); r == nil || r.MessageID != "2" {
		t.Errorf("remembered record of a = %+v, want the one read after it was forgotten (message id 2)", r)
	}
}

// With CreateFirst, when most keys the engine does not remember turn out
// to have a record (a client resending through this instance what another
// instance settled), the engine reads such keys first instead of
// attempting a create for each (a create that finds the record costs
// more than the read that finds it); once fresh keys prevail again, it
// creates them without a read. Every retry is replayed either way.
func TestCreateFirstReadsFirstWhileUnrememberedKeysMostlyHaveRecords(t *testing.T) {
	st := &countingStore{Store: state.NewMem(nil)}
	f := &fakeForwarder{}
	first := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "a", CreateFirst: true})
	const n = 64
	ids := make([]string, n+1) // the last is retried on the other engine last of all
	for i := range n + 1 {
		a := first.Submit(ctx, "shop", Policy{}, submit(t, fmt.Sprint("k-rf-", i), "hello"))
		if a.Outcome != OutForwarded {
			t.Fatalf("submit %d = %s, want forwarded", i, a.Outcome)
		}
		ids[i] = a.MessageID
	}

	other := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "b", CreateFirst: true, Secret: first.cfg.Secret})
	st.reads.Store(0)
	st.writes.Store(0)
	lateCreates := int64(0)
	for i := range n {
		a := other.Submit(ctx, "shop", Policy{}, submit(t, fmt.Sprint("k-rf-", i), "hello"))
		if a.Outcome != OutReplayed || a.MessageID != ids[i] {
			t.Fatalf("retry %d on the other engine = {%s %q}, want replayed with %q", i, a.Outcome, a.MessageID, ids[i])
		}
		if i == n/2 {
			lateCreates = st.writes.Load()
		}
	}
	if f.count() != n+1 {
		t.Errorf("retries were sent upstream: %d forwards in all, want %d", f.count(), n+1)
	}
	if late := st.writes.Load() - lateCreates; late != 0 {
		t.Errorf("the last %d retries attempted %d creates, want 0 (read first once most unremembered keys had a record)", n-n/2-1, late)
	}
	if st.reads.Load() == 0 {
		t.Error("no retry was read first")
	}

	// Submits without a key (untracked: a unique key of their own) are
	// never read first, and do not count as fresh keys: the retries that
	// follow them are still read first.
	st.reads.Store(0)
	for i := range n {
		if a := other.Submit(ctx, "shop", Policy{}, submit(t, "", fmt.Sprint("no key ", i))); a.Outcome != OutUntracked {
			t.Fatalf("submit without a key %d = %s, want untracked", i, a.Outcome)
		}
	}
	if r := st.reads.Load(); r != 0 {
		t.Errorf("submits without a key were read %d times, want 0", r)
	}
	writes := st.writes.Load()
	if a := other.Submit(ctx, "shop", Policy{}, submit(t, fmt.Sprint("k-rf-", n), "hello")); a.Outcome != OutReplayed || a.MessageID != ids[n] {
		t.Fatalf("retry after the untracked submits = {%s %q}, want replayed with %q", a.Outcome, a.MessageID, ids[n])
	}
	if w := st.writes.Load() - writes; w != 0 || st.reads.Load() != 1 {
		t.Errorf("a retry after %d untracked submits attempted %d creates and %d reads, want 0 and 1 (still read first)", n, w, st.reads.Load())
	}

	// Fresh keys again: after a while they are created without a read.
	var lateReads int64
	for i := range n {
		if i == n/2 {
			lateReads = st.reads.Load()
		}
		if a := other.Submit(ctx, "shop", Policy{}, submit(t, fmt.Sprint("k-fresh-", i), "hello")); a.Outcome != OutForwarded {
			t.Fatalf("fresh submit %d = %s, want forwarded", i, a.Outcome)
		}
	}
	if late := st.reads.Load() - lateReads; late != 0 {
		t.Errorf("the last %d fresh keys were read %d times before their create, want 0 (created first again once fresh keys prevailed)", n-n/2, late)
	}
}

// remembered is the record f remembers under k, or nil.
func remembered(f *finals, k state.Key) *state.Record {
	var r state.Record
	if !f.get(k, &r) {
		return nil
	}
	return &r
}

// Keys whose hashes collide are never answered by each other's record:
// the newer takes the hash's place, the older is then not remembered (a
// read of the store), and forgetting or evicting one never drops the
// other.
func TestFinalsNeverAnswerAKeyWithAnotherKeysRecord(t *testing.T) {
	f := newFinalsOf(2, 2)
	f.hashOf = func(k state.Key) uint64 {
		if k.Key == "c" || k.Key == "d" {
			return uint64(k.Key[0])
		}
		return 7 // a, b and e collide
	}
	a, b, c := state.Key{Account: "x", Key: "a"}, state.Key{Account: "x", Key: "b"}, state.Key{Account: "x", Key: "c"}
	f.put(&state.Record{Key: a, State: state.Accepted, MessageID: "A"})
	if r := remembered(f, b); r != nil {
		t.Fatalf("b answered by %q, a's record", r.MessageID)
	}
	f.put(&state.Record{Key: b, State: state.Accepted, MessageID: "B"})
	if r := remembered(f, a); r != nil {
		t.Errorf("a answered by %q after b took its hash; want not remembered", r.MessageID)
	}
	if r := remembered(f, b); r == nil || r.MessageID != "B" {
		t.Errorf("b = %+v, want its own record", r)
	}
	f.forget(a) // not remembered: b stays
	if r := remembered(f, b); r == nil || r.MessageID != "B" {
		t.Errorf("b after forgetting a = %+v, want its own record", r)
	}
	// a's slot is the oldest: reusing it must not evict b.
	f.put(&state.Record{Key: c, State: state.Rejected, Status: 0x45})
	if r := remembered(f, c); r == nil || r.State != state.Rejected || r.Status != 0x45 {
		t.Errorf("c = %+v, want its rejection", r)
	}
	if r := remembered(f, b); r == nil || r.MessageID != "B" {
		t.Errorf("b after a's slot was reused = %+v, want its own record", r)
	}
	// A key read from the store whose hash is b's takes it, in the other
	// ring; evicting each ring's oldest then drops neither wrongly.
	e := state.Key{Account: "x", Key: "e"}
	f.learn(&state.Record{Key: e, State: state.Accepted, MessageID: "E"})
	if r := remembered(f, b); r != nil {
		t.Errorf("b answered by %q after e took its hash", r.MessageID)
	}
	f.put(&state.Record{Key: state.Key{Account: "x", Key: "d"}, State: state.Accepted, MessageID: "D"}) // evicts b's slot
	if r := remembered(f, e); r == nil || r.MessageID != "E" {
		t.Errorf("e after b's slot was reused = %+v, want its own record", r)
	}
}
