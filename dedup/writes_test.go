package dedup

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/smppproxy/smppproxy/state"
)

// countingStore counts the durable writes the engine asks of its store.
type countingStore struct {
	state.Store
	writes atomic.Int64
}

func (s *countingStore) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	s.writes.Add(1)
	return s.Store.Create(ctx, rec)
}

func (s *countingStore) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	s.writes.Add(1)
	return s.Store.Update(ctx, k, fn)
}

func TestFreshSubmitCostsTwoWritesAndAReplayNone(t *testing.T) {
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
	r, err := st.Get(ctx, state.Key{Account: "shop", Key: KeyOfTLV([]byte("k-two"))})
	if err != nil || r.State != state.Accepted || r.Session != "up/s1" || r.Sequence != 1 {
		t.Fatalf("record after the submit = %+v, %v; want accepted, journaled on up/s1 sequence 1", r, err)
	}
	st.writes.Store(0)
	again := e.Submit(ctx, "shop", Policy{}, submit(t, "k-two", "hello"))
	if again.Outcome != OutReplayed || again.MessageID != first.MessageID {
		t.Errorf("retry = {%s %q}, want replayed with %q", again.Outcome, again.MessageID, first.MessageID)
	}
	if n := st.writes.Load(); n != 0 || f.count() != 1 {
		t.Errorf("a retry of an accepted key asked for %d writes and made %d forwards in all, want 0 writes and 1 forward", n, f.count())
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
