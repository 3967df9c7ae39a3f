package dedup

// A store error must not leave a record in `sent` with no live owner:
// nothing in the running process would move it, so every retry would wait
// inflight_wait and get ESME_RTHROTTLED until a restart (and be held
// `unknown` after it), although the proxy knows what happened:
//
//   - Create is reported failed but was applied (a failed Badger commit is
//     ambiguous: Badger puts a batch in its memtable before syncing the
//     WAL, so later reads see it). Nothing was forwarded: a retry sends it.
//   - The outcome write fails (disk full for a moment) after the SMSC
//     accepted: once the store works again the outcome is written and a
//     retry is answered with the message id the proxy was given.
//   - An Update is applied and then reported failed (the same ambiguous
//     commit): the record must still be left as retryable as it was.

import (
	"context"
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// appliedThenFailedStore applies a write and then reports it failed, as a
// Badger commit that reached the memtable before its fsync failed: the
// record is changed, the caller is told it is not. It does so once, for
// the first Update for which failIf(before, after) is true, or (armed by
// failNextCreate) the next Create that creates a record.
type appliedThenFailedStore struct {
	state.Store
	mu             sync.Mutex
	failIf         func(before, after *state.Record) bool
	failNextCreate bool
}

var errAppliedThenFailed = errors.New("state: commit: sync wal: input/output error")

func (s *appliedThenFailedStore) arm(failIf func(before, after *state.Record) bool) {
	s.mu.Lock()
	s.failIf = failIf
	s.mu.Unlock()
}

func (s *appliedThenFailedStore) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	var before *state.Record
	rec, err := s.Store.Update(ctx, k, func(r *state.Record) error {
		before = r.Clone()
		return fn(r)
	})
	if err != nil {
		return rec, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failIf != nil && s.failIf(before, rec) {
		s.failIf = nil
		return nil, errAppliedThenFailed
	}
	return rec, nil
}

// becomesSent matches the write that makes a record in state from `sent`
// (a takeover or a renewal).
func becomesSent(from state.SubmitState) func(before, after *state.Record) bool {
	return func(before, after *state.Record) bool { return before.State == from && after.State == state.Sent }
}

func newAppliedThenFailedEngine(t *testing.T, f *fakeForwarder) (*Engine, *appliedThenFailedStore, *clock) {
	t.Helper()
	c := newClock()
	st := &appliedThenFailedStore{Store: state.NewMem(c.Now)}
	return newTestEngine(t, Config{Store: st, Forwarder: f, Now: c.Now, InstanceID: "applied"}), st, c
}

// afterFailedWrite checks that a submit whose store write was applied but
// reported failed forwarded nothing and left the record retryable, and that
// the next retry is forwarded and accepted.
func afterFailedWrite(t *testing.T, e *Engine, st state.Store, f *fakeForwarder, k state.Key, p Policy, retry func() *smpp.Submit) {
	t.Helper()
	before := f.count()
	a := e.Submit(ctx, k.Account, p, retry())
	if a.Status != smpp.StatusSysErr || a.Outcome != OutStoreErr || f.count() != before {
		t.Fatalf("submit whose write was applied but reported failed = %v %s after %d forwards (was %d); want ESME_RSYSERR store_error, nothing forwarded",
			a.Status, a.Outcome, f.count(), before)
	}
	r, err := st.Get(ctx, k)
	if err != nil || r.State != state.Retryable {
		t.Fatalf("record after the failed write = %+v, %v; want retryable (nothing was sent)", r, err)
	}
	a = e.Submit(ctx, k.Account, p, retry())
	if a.Status != smpp.StatusOK || f.count() != before+1 {
		t.Errorf("next retry = %v %s after %d forwards; want forwarded once more and accepted (%d forwards)", a.Status, a.Outcome, f.count(), before+1)
	}
}

func TestFailedButAppliedTakeoverOfARetryableRecordLeavesItRetryable(t *testing.T) {
	f := &fakeForwarder{answer: firstThen(Result{Kind: Answered, Status: smpp.StatusThrottled}, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m2"})}
	e, st, _ := newAppliedThenFailedEngine(t, f)
	p := Policy{InflightWait: 50 * time.Millisecond}
	if a := e.Submit(ctx, "shop", p, submit(t, "r1", "hello")); a.Outcome != OutRetryable {
		t.Fatalf("first submit = %s, want retryable", a.Outcome)
	}
	st.arm(becomesSent(state.Retryable))
	k := state.Key{Account: "shop", Key: KeyOfTLV([]byte("r1"))}
	afterFailedWrite(t, e, st, f, k, p, func() *smpp.Submit { return submit(t, "r1", "hello") })
	// A restart must not hold the key unknown either: nothing is left sent.
	if n, err := e.Recover(ctx); n != 0 || err != nil {
		t.Errorf("Recover = %d, %v; want 0 records left sent", n, err)
	}
}

func TestFailedButAppliedRenewalOfAFingerprintRecordLeavesItRetryable(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newAppliedThenFailedEngine(t, f)
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute, InflightWait: 50 * time.Millisecond}
	first := e.Submit(ctx, "shop", p, submit(t, "", "hello"))
	if first.Status != smpp.StatusOK {
		t.Fatalf("first submit = %v %s, want accepted", first.Status, first.Outcome)
	}
	clk.Advance(2 * time.Minute) // past fingerprint_window: the next identical submit is a new message
	st.arm(becomesSent(state.Accepted))
	afterFailedWrite(t, e, st, f, first.Key, p, func() *smpp.Submit { return submit(t, "", "hello") })
}

func (s *appliedThenFailedStore) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	ex, created, err := s.Store.Create(ctx, rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && created && s.failNextCreate {
		s.failNextCreate = false
		return nil, false, errAppliedThenFailed
	}
	return ex, created, err
}

func TestAmbiguousCreateFailureDoesNotWedgeTheKey(t *testing.T) {
	st := &appliedThenFailedStore{Store: state.NewMem(nil), failNextCreate: true}
	f := &fakeForwarder{} // counts the forwards written upstream (journaled first)
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "amb"})
	p := Policy{InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	a1 := e.Submit(bg, "shop", p, submit(t, "k1", "hello"))
	if a1.Status != smpp.StatusSysErr || f.count() != 0 {
		t.Fatalf("submit whose Create failed = %v %s with %d forwards, want ESME_RSYSERR and nothing forwarded", a1.Status, a1.Outcome, f.count())
	}
	// Nothing was sent, and the record was released before the answer: the
	// ESME's first retry sends it.
	if a := e.Submit(bg, "shop", p, submit(t, "k1", "hello")); a.Status != smpp.StatusOK || f.count() != 1 {
		t.Errorf("retry after an ambiguous Create failure = %v %s with %d forwards, want accepted with one: the key must not stay `sent` with no owner", a.Status, a.Outcome, f.count())
	}
}

func TestOutcomeWriteFailureDoesNotWedgeTheKey(t *testing.T) {
	mem := storetest.NewFaulty(state.NewMem(nil))
	// The disk fills up while the SMSC answers; space is back right after.
	f := accepting(func(n int) {
		if n == 1 {
			mem.FailWrites(errors.New("no space left on device"))
		}
	})
	e := newTestEngine(t, Config{Store: mem, Forwarder: f, InstanceID: "amb2"})
	p := Policy{InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	a1 := e.Submit(bg, "shop", p, submit(t, "k2", "hello"))
	mem.FailWrites(nil)
	if a1.Status != smpp.StatusSysErr {
		t.Fatalf("submit whose outcome could not be stored = %v %s, want ESME_RSYSERR", a1.Status, a1.Outcome)
	}
	// The store works again: the outcome is written in the background, and
	// a retry is answered by what happened (status 0 with m1, the id the
	// SMSC gave), not by waiting for an owner that is gone
	// (ESME_RTHROTTLED), and is not forwarded again.
	k := state.Key{Account: "shop", Key: KeyOfTLV([]byte("k2"))}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r, err := mem.Get(bg, k)
		return err == nil && r.State != state.Sent
	}, "the outcome was written once the store worked again")
	a2 := e.Submit(bg, "shop", p, submit(t, "k2", "hello"))
	if f.Calls() != 1 {
		t.Fatalf("forwards = %d, want 1 (the SMSC accepted the first)", f.Calls())
	}
	if a2.Status != smpp.StatusOK || a2.MessageID != "m1" || a2.Outcome != OutReplayed {
		t.Errorf("retry once the store works again = {%v %q %s}, want {0 m1 replayed}", a2.Status, a2.MessageID, a2.Outcome)
	}
}
