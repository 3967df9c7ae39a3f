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

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// ambStore reports the next successful Create as failed, as a Badger
// commit whose fsync failed after the memtable was updated.
type ambStore struct {
	state.Store
	failNextCreate atomic.Bool
}

func (s *ambStore) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	ex, created, err := s.Store.Create(ctx, rec)
	if err == nil && created && s.failNextCreate.CompareAndSwap(true, false) {
		return nil, false, errors.New("state: commit: sync wal: input/output error")
	}
	return ex, created, err
}

func ambSubmit(t *testing.T, key string) *smpp.Submit {
	t.Helper()
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(3, smpptest.SubmitFields{
		Src: "SHOP", Dst: "447700900123", ShortMessage: []byte("hello"),
		TLVs: []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAmbiguousCreateFailureDoesNotWedgeTheKey(t *testing.T) {
	st := &ambStore{Store: state.NewMem(nil)}
	var sent atomic.Int64 // forwards written upstream (journaled first)
	f := accepting(func(int) { sent.Add(1) })
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "amb"})
	p := Policy{InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	st.failNextCreate.Store(true)
	a1 := e.Submit(bg, "shop", p, ambSubmit(t, "k1"))
	if a1.Status != smpp.StatusSysErr || sent.Load() != 0 {
		t.Fatalf("submit whose Create failed = %v %s with %d forwards, want ESME_RSYSERR and nothing forwarded", a1.Status, a1.Outcome, sent.Load())
	}
	// Nothing was sent: the ESME's retry must be able to send it.
	for i := range 3 {
		a := e.Submit(bg, "shop", p, ambSubmit(t, "k1"))
		if a.Status == smpp.StatusOK {
			if sent.Load() != 1 {
				t.Fatalf("forwards = %d, want 1", sent.Load())
			}
			return
		}
		t.Logf("retry %d = %v %s", i+1, a.Status, a.Outcome)
	}
	t.Errorf("every retry after an ambiguous Create failure was refused; forwards = %d: the key is stuck in `sent` with no owner until restart", sent.Load())
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

	a1 := e.Submit(bg, "shop", p, ambSubmit(t, "k2"))
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
	a2 := e.Submit(bg, "shop", p, ambSubmit(t, "k2"))
	if f.Calls() != 1 {
		t.Fatalf("forwards = %d, want 1 (the SMSC accepted the first)", f.Calls())
	}
	if a2.Status != smpp.StatusOK || a2.MessageID != "m1" || a2.Outcome != OutReplayed {
		t.Errorf("retry once the store works again = {%v %q %s}, want {0 m1 replayed}", a2.Status, a2.MessageID, a2.Outcome)
	}
}
