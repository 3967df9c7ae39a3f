package dedup

import (
	"github.com/smppproxy/smppproxy/config"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// A fingerprint record deduplicates only within fingerprint_window but is
// kept for the account's retention: when an identical message starts a
// new operation after the window, the old record is archived, and its
// receipts still find it by message id.
func TestFingerprintWindowRenewsButKeepsTheOldRecordForReceipts(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute, Retention: 72 * time.Hour}
	first := e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	clk.Advance(2 * time.Minute)
	second := e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	if f.count() != 2 || first.MessageID == second.MessageID {
		t.Fatalf("after the window: forwards %d, ids %q %q; want a second SMS with its own id", f.count(), first.MessageID, second.MessageID)
	}
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
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute, Retention: 72 * time.Hour}
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
