package dedup

// Review finding: after a store error the engine can leave a record in
// `sent` with no live owner. Nothing in the running process ever moves it,
// so every retry waits inflight_wait and gets ESME_RTHROTTLED, forever
// (after a restart Recover makes it `unknown`: 0x08 until an operator
// resolves it), although the proxy knows what happened:
//
//   - Create is reported failed but was applied. The state package says a
//     failed Badger commit is ambiguous (Badger puts a batch in its memtable
//     before syncing the WAL, so later reads see it). Nothing was forwarded.
//   - The outcome write fails (disk full for a moment) after the SMSC
//     accepted: the record stays `sent`; once the store works again a
//     retry still gets 0x58 instead of the message id the proxy was given.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// rvAmbStore reports the next successful Create as failed, as a Badger
// commit whose fsync failed after the memtable was updated.
type rvAmbStore struct {
	state.Store
	failNextCreate atomic.Bool
}

func (s *rvAmbStore) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	ex, created, err := s.Store.Create(ctx, rec)
	if err == nil && created && s.failNextCreate.CompareAndSwap(true, false) {
		return nil, false, errors.New("state: commit: sync wal: input/output error")
	}
	return ex, created, err
}

type rvAmbForwarder struct {
	mu    sync.Mutex
	n     int
	after func(n int) // called after the journal, before answering
}

func (f *rvAmbForwarder) Forward(_ context.Context, a *Attempt) Result {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
		return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
	}
	if f.after != nil {
		f.after(n)
	}
	return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: fmt.Sprintf("m%d", n), Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
}

func (f *rvAmbForwarder) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.n }

func rvAmbSubmit(t *testing.T, key string) *smpp.Submit {
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

func TestReviewAmbiguousCreateFailureDoesNotWedgeTheKey(t *testing.T) {
	st := &rvAmbStore{Store: state.NewMem(nil)}
	f := &rvAmbForwarder{}
	e := New(Config{Store: st, Forwarder: f, InstanceID: "rv-amb"})
	p := Policy{InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	st.failNextCreate.Store(true)
	a1 := e.Submit(bg, "shop", p, rvAmbSubmit(t, "k1"))
	if a1.Status != smpp.StatusSysErr || f.count() != 0 {
		t.Fatalf("submit whose Create failed = %v %s with %d forwards, want ESME_RSYSERR and nothing forwarded", a1.Status, a1.Outcome, f.count())
	}
	// Nothing was sent: the ESME's retry must be able to send it.
	for i := range 3 {
		a := e.Submit(bg, "shop", p, rvAmbSubmit(t, "k1"))
		if a.Status == smpp.StatusOK {
			if f.count() != 1 {
				t.Fatalf("forwards = %d, want 1", f.count())
			}
			return
		}
		t.Logf("retry %d = %v %s", i+1, a.Status, a.Outcome)
	}
	t.Errorf("every retry after an ambiguous Create failure was refused; forwards = %d: the key is stuck in `sent` with no owner until restart", f.count())
}

func TestReviewOutcomeWriteFailureDoesNotWedgeTheKey(t *testing.T) {
	mem := storetest.NewFaulty(state.NewMem(nil))
	// The disk fills up while the SMSC answers; space is back right after.
	f := &rvAmbForwarder{after: func(int) { mem.FailWrites(errors.New("no space left on device")) }}
	e := New(Config{Store: mem, Forwarder: f, InstanceID: "rv-amb2"})
	p := Policy{InflightWait: 50 * time.Millisecond}
	bg := context.Background()

	a1 := e.Submit(bg, "shop", p, rvAmbSubmit(t, "k2"))
	mem.FailWrites(nil)
	f.after = nil
	if a1.Status != smpp.StatusSysErr {
		t.Fatalf("submit whose outcome could not be stored = %v %s, want ESME_RSYSERR", a1.Status, a1.Outcome)
	}
	// The store works again. A retry must be answered by what happened
	// (ideally status 0 with m1, the id the SMSC gave; at least the
	// unknown_status of an ambiguous outcome), not wait for an owner that
	// is gone and get ESME_RTHROTTLED, and must not be forwarded again.
	time.Sleep(100 * time.Millisecond)
	a2 := e.Submit(bg, "shop", p, rvAmbSubmit(t, "k2"))
	if f.count() != 1 {
		t.Fatalf("forwards = %d, want 1 (the SMSC accepted the first)", f.count())
	}
	r, _ := mem.Get(bg, state.Key{Account: "shop", Key: KeyOfTLV([]byte("k2"))})
	st := ""
	if r != nil {
		st = string(r.State)
	}
	if a2.Outcome == OutThrottled || st == string(state.Sent) {
		t.Errorf("retry once the store works again = %v %q %s (record %s), want status 0 with m1 (or unknown_status): "+
			"the record stays `sent` with no owner and every retry gets 0x58 until restart", a2.Status, a2.MessageID, a2.Outcome, st)
	}
}
