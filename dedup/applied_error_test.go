package dedup

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// appliedThenFailedStore applies a write and then reports it failed, as a
// Badger commit that reached the memtable before its fsync failed: the
// record is changed, the caller is told it is not. It does so once, for
// the first Update for which failIf(before, after) is true.
type appliedThenFailedStore struct {
	state.Store
	mu     sync.Mutex
	failIf func(before, after *state.Record) bool
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
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	st := &appliedThenFailedStore{Store: state.NewMem(c.now)}
	return newTestEngine(t, Config{Store: st, Forwarder: f, Now: c.now, InstanceID: "applied"}), st, c
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
	f := &fakeForwarder{answer: func(n int) Result {
		if n == 1 {
			return Result{Kind: Answered, Status: smpp.StatusThrottled}
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m2"}
	}}
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
	p := Policy{Key: KeyFingerprint, FingerprintWindow: time.Minute, InflightWait: 50 * time.Millisecond}
	first := e.Submit(ctx, "shop", p, submit(t, "", "hello"))
	if first.Status != smpp.StatusOK {
		t.Fatalf("first submit = %v %s, want accepted", first.Status, first.Outcome)
	}
	clk.add(2 * time.Minute) // past fingerprint_window: the next identical submit is a new message
	st.arm(becomesSent(state.Accepted))
	afterFailedWrite(t, e, st, f, first.Key, p, func() *smpp.Submit { return submit(t, "", "hello") })
}
