package dedup

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// downAfterCreate applies the next Create, reports it failed and refuses
// every write from then on: a database that goes away while it commits
// (the commit was applied, its answer lost) and stays away a while.
type downAfterCreate struct {
	*storetest.Faulty
	armed bool
}

func (s *downAfterCreate) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	ex, created, err := s.Faulty.Create(ctx, rec)
	if err == nil && created && s.armed {
		s.armed = false
		s.FailWrites(errors.New("database unreachable"))
		return nil, false, errors.New("commit: connection reset")
	}
	return ex, created, err
}

// A record whose create was applied though reported failed is released
// as retryable; when the store refuses that release too (it is still
// down), the release is retried until the store is back. Otherwise the
// record stays `sent` under a live owner, and every retry of the key is
// throttled until that instance restarts.
func TestReleaseOfAnAppliedCreateIsRetriedWhileTheStoreIsDown(t *testing.T) {
	st := &downAfterCreate{Faulty: storetest.NewFaulty(state.NewMem(nil)), armed: true}
	var sent atomic.Int64 // forwards written upstream (journaled first)
	f := accepting(func(int) { sent.Add(1) })
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "rel"})
	p := Policy{InflightWait: 20 * time.Millisecond}
	bg := context.Background()

	if a := e.Submit(bg, "shop", p, submit(t, "k3", "hello")); a.Status != smpp.StatusSysErr || sent.Load() != 0 {
		t.Fatalf("submit whose create was reported failed = %v with %d forwards, want ESME_RSYSERR and none", a.Status, sent.Load())
	}
	st.FailWrites(nil) // the store is back
	k := state.Key{Account: "shop", Key: KeyOfTLV([]byte("k3"))}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r, err := st.Get(bg, k)
		return err == nil && r.State == state.Retryable
	}, "the record released as retryable once the store is back")
	if a := e.Submit(bg, "shop", p, submit(t, "k3", "hello")); a.Status != smpp.StatusOK || sent.Load() != 1 {
		t.Errorf("retry once the store is back = %v with %d forwards, want accepted with one forward", a.Status, sent.Load())
	}
}
