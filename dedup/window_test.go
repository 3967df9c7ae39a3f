package dedup

import (
	"context"
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// minuteWindow: fingerprint keys, a dedup window of a minute, records
// kept for three days.
var minuteWindow = Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute, Retention: 72 * time.Hour}

// acrossTheWindow submits the same text through a, then past the window
// through b, and checks that the second is a second SMS with its own id.
func acrossTheWindow(t *testing.T, f *fakeForwarder, clk *clock, a, b *Engine) (first, second Answer) {
	t.Helper()
	first = a.Submit(ctx, "shop", minuteWindow, submit(t, "", "same text"))
	clk.Advance(2 * time.Minute)
	second = b.Submit(ctx, "shop", minuteWindow, submit(t, "", "same text"))
	if f.count() != 2 || first.MessageID == second.MessageID {
		t.Fatalf("after the window: forwards %d, ids %q %q; want a second SMS with its own id", f.count(), first.MessageID, second.MessageID)
	}
	return first, second
}

// A fingerprint record deduplicates only within fingerprint_window but is
// kept for the account's retention: when an identical message starts a
// new operation after the window, the old record is archived, and its
// receipts still find it by message id.
func TestFingerprintWindowRenewsButKeepsTheOldRecordForReceipts(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	p := minuteWindow
	first, second := acrossTheWindow(t, f, clk, e, e)
	old, err := st.ByMessageID(ctx, "up", first.MessageID)
	if err != nil || !strings.Contains(old.Key.Key, "@") || old.State != state.Accepted {
		t.Errorf("ByMessageID(first) = %+v, %v; want the archived accepted record", old, err)
	}
	cur, err := st.ByMessageID(ctx, "up", second.MessageID)
	if err != nil || cur.Key != second.Key {
		t.Errorf("ByMessageID(second) = %+v, %v; want the current record", cur, err)
	}
	// Within the new window the renewed record deduplicates again.
	clk.Advance(30 * time.Second)
	if a := e.Submit(ctx, "shop", p, submit(t, "", "same text")); a.MessageID != second.MessageID || f.count() != 2 {
		t.Errorf("inside the new window = %q (forwards %d), want replay of %q", a.MessageID, f.count(), second.MessageID)
	}
}

// The engine remembers of a settled record only what answering a retry
// needs; a renewal past the fingerprint window archives the whole record
// as the store holds it (where it was sent, its history), not that.
func TestFingerprintWindowArchivesTheWholeRecordTheEngineRemembered(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	p := minuteWindow
	first := e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	stored, err := st.Get(ctx, first.Key)
	if err != nil || stored.Session == "" || len(stored.History) == 0 {
		t.Fatalf("first record = %+v, %v; want one with its session and history", stored, err)
	}
	clk.Advance(2 * time.Minute)
	e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	arch, err := st.ByMessageID(ctx, "up", first.MessageID)
	if err != nil || !strings.Contains(arch.Key.Key, "@") {
		t.Fatalf("ByMessageID(first) = %+v, %v; want the archived record", arch, err)
	}
	if arch.Session != stored.Session || arch.Sequence != stored.Sequence || arch.NormID != stored.NormID || len(arch.History) < len(stored.History) {
		t.Errorf("archived record = session %q seq %d norm %q, %d events; want the stored one's: %q %d %q, at least %d events",
			arch.Session, arch.Sequence, arch.NormID, len(arch.History), stored.Session, stored.Sequence, stored.NormID, len(stored.History))
	}
}

// Instances share the store, each remembering what it settled: when
// another instance renewed a key past its fingerprint window, a retry of
// that renewal reaching this instance is replayed with the renewal's id.
// This instance's memory of the key (its own, older record, past the
// window) must not make it renew the key again and send a third SMS.
func TestARetryOfAnotherInstancesRenewalIsReplayedNotRenewedAgain(t *testing.T) {
	f := &fakeForwarder{}
	a, st, clk := newEngine(t, f)
	b := newTestEngine(t, Config{Store: st, Forwarder: f, Now: clk.Now, InstanceID: "b", Secret: a.cfg.Secret})
	p := minuteWindow
	_, renewed := acrossTheWindow(t, f, clk, a, b)
	clk.Advance(10 * time.Second)
	retry := a.Submit(ctx, "shop", p, submit(t, "", "same text"))
	if retry.Outcome != OutReplayed || retry.MessageID != renewed.MessageID || f.count() != 2 {
		t.Errorf("retry of the renewal on the first instance = {%s %q} after %d forwards; want replayed with %q, 2 forwards", retry.Outcome, retry.MessageID, f.count(), renewed.MessageID)
	}
}

// getFails answers the next Get with err, once (the store's other
// operations work).
type getFails struct {
	state.Store
	err atomic.Pointer[error]
}

func (s *getFails) Get(ctx context.Context, k state.Key) (*state.Record, error) {
	if err := s.err.Swap(nil); err != nil {
		return nil, *err
	}
	return s.Store.Get(ctx, k)
}

// A renewal past the fingerprint window archives the record the store
// holds: when the store cannot be read then, nothing is sent (0x08); when
// it does not find the record, the submit is decided again by what the
// store has (here the record again: renewed and forwarded).
func TestARenewalReadsTheStoresRecordFirst(t *testing.T) {
	p := minuteWindow
	for _, tc := range []struct {
		name     string
		err      error
		status   smpp.Status
		outcome  Outcome
		forwards int
	}{
		{"store unreadable", errors.New("store down"), smpp.StatusSysErr, OutStoreErr, 1},
		{"record not found", state.ErrNotFound, smpp.StatusOK, OutForwarded, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			st := &getFails{Store: state.NewMem(clk.Now)}
			f := &fakeForwarder{}
			e := newTestEngine(t, Config{Store: st, Forwarder: f, Now: clk.Now, InstanceID: "a"})
			e.Submit(ctx, "shop", p, submit(t, "", "same text"))
			clk.Advance(2 * time.Minute)
			st.err.Store(&tc.err)
			if a := e.Submit(ctx, "shop", p, submit(t, "", "same text")); a.Status != tc.status || a.Outcome != tc.outcome || f.count() != tc.forwards {
				t.Errorf("renewal = {%v %s} after %d forwards; want {%v %s} after %d", a.Status, a.Outcome, f.count(), tc.status, tc.outcome, tc.forwards)
			}
		})
	}
}
