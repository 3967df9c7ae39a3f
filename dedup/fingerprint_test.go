package dedup

import (
	"encoding/hex"
	"github.com/smppproxy/smppproxy/config"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// A fingerprint is an HMAC under the install's secret: the record holds
// neither the plain SHA-256 of the message nor a key derived from it, and
// another install (another secret) derives other keys.
func TestFingerprintsAndFingerprintKeysAreKeyedByTheSecret(t *testing.T) {
	p := Policy{Key: config.KeyFingerprint}
	plain := submit(t, "", "Your code is 123456").Fingerprint()
	var keys []string
	for range 2 {
		f := &fakeForwarder{}
		e, st, _ := newEngine(t, f)
		a := e.Submit(ctx, "shop", p, submit(t, "", "Your code is 123456"))
		r, err := st.Get(ctx, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if r.FingerprintVersion != state.FingerprintHMAC || r.Fingerprint == plain || strings.Contains(r.Key.Key, hex.EncodeToString(plain[:])) {
			t.Errorf("record version %d, fingerprint %x, key %s; want an HMAC fingerprint and key, not the plain SHA-256 %x", r.FingerprintVersion, r.Fingerprint, r.Key.Key, plain)
		}
		if d := e.DisplayKey(r.Key.Key); !strings.HasPrefix(d, "fp~") || len(d) != len("fp~")+8 || strings.Contains(d, hex.EncodeToString(r.Fingerprint[:4])) {
			t.Errorf("DisplayKey(%s) = %s, want fp~ and an 8-digit tag that is not the fingerprint", r.Key.Key, d)
		}
		keys = append(keys, r.Key.Key)
	}
	if keys[0] == keys[1] {
		t.Errorf("two installs derived the same fingerprint key %s", keys[0])
	}
}

// Records written before the secret (unsalted SHA-256, version 1) keep
// working until they expire: a retry is compared with its own version-1
// fingerprint (replayed, or a conflict for other content), and a
// fingerprint-keyed retry finds the record under its version-1 key.
func TestRecordsWrittenBeforeTheSecretStillDeduplicate(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	now := clk.Now()
	legacy := func(key string, sub *smpp.Submit) *state.Record {
		return &state.Record{
			Key: state.Key{Account: "shop", Key: key}, Fingerprint: sub.Fingerprint(), State: state.Accepted,
			MessageID: "m-old", Owner: "old", Created: now, Updated: now, Expires: now.Add(time.Hour),
		}
	}
	old := submit(t, "otp-1", "code 1")
	fpOld := old.Fingerprint()
	for _, r := range []*state.Record{
		legacy(KeyOfTLV([]byte("otp-1")), old),
		legacy("fp:"+hex.EncodeToString(fpOld[:]), submit(t, "", "code 1")),
	} {
		if _, created, err := st.Create(ctx, r); !created || err != nil {
			t.Fatalf("Create(%s) = %v, %v", r.Key.Key, created, err)
		}
	}
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "otp-1", "code 1")); a.Outcome != OutReplayed || a.MessageID != "m-old" {
		t.Errorf("retry of a version-1 record = %s %q, want replayed m-old", a.Outcome, a.MessageID)
	}
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "otp-1", "code 2")); a.Outcome != OutConflict {
		t.Errorf("other content under a version-1 record's key = %s, want conflict", a.Outcome)
	}
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute}
	if a := e.Submit(ctx, "shop", p, submit(t, "", "code 1")); a.Outcome != OutReplayed || a.MessageID != "m-old" {
		t.Errorf("fingerprint-keyed retry of a version-1 record = %s %q, want replayed m-old", a.Outcome, a.MessageID)
	}
	if f.count() != 0 {
		t.Fatalf("forwards = %d, want 0", f.count())
	}
	clk.Advance(2 * time.Minute) // past the window: a new message, under the keyed fingerprint
	a := e.Submit(ctx, "shop", p, submit(t, "", "code 1"))
	if a.Outcome != OutForwarded || f.count() != 1 || strings.Contains(a.Key.Key, hex.EncodeToString(fpOld[:])) {
		t.Errorf("after the window = %s with %d forwards under %s, want forwarded under a keyed fingerprint key", a.Outcome, f.count(), a.Key.Key)
	}
}
