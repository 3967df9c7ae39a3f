package dedup

// Under the fingerprint key policy (and missing_key: fingerprint) the
// record key of a segment carries the concatenation reference number, which
// the fingerprint zeroes. Otherwise two different long messages to one
// number within fingerprint_window whose part k is byte-identical (a
// fixed-length variable part in part 1 followed by a fixed text — e.g. a
// new OTP requested 20 s after the first) would share the record of part
// k: part 2 of the second message would be answered with the first
// message's part-2 id and never sent, and the handset could never
// reassemble the second message. The SPEC
// accepts merging two *identical* messages in the window, not parts of
// different ones ("segments of one message are never duplicates of each
// other").

import (
	"context"
	"github.com/smppproxy/smppproxy/config"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

func TestFingerprintPolicyKeepsPartsOfDifferentMessagesApart(t *testing.T) {
	f := journaling(func(n int) Result {
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m" + string(rune('0'+n)), Upstream: "up"}
	})
	e := newTestEngine(t, Config{Store: state.NewMem(nil), Forwarder: f, InstanceID: "seg"})
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute, InflightWait: 50 * time.Millisecond}
	part := func(ref, seq byte, text string) *smpp.Submit {
		ud := append([]byte{0x05, 0x00, 0x03, ref, 0x02, seq}, text...)
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, smpptest.SubmitFields{
			Src: "BANK", Dst: "447700900123", EsmClass: 0x40, ShortMessage: ud}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const tail = " is your one-time code. Never share it with anyone, our staff will never ask."
	bg := context.Background()
	// Message 1 (ref 0x11) and, a few seconds later, message 2 (ref 0x22):
	// different first parts, identical second parts.
	for _, s := range []*smpp.Submit{
		part(0x11, 1, "Code 111111."), part(0x11, 2, tail),
		part(0x22, 1, "Code 222222."), part(0x22, 2, tail),
	} {
		if a := e.Submit(bg, "bank", p, s); a.Status != smpp.StatusOK {
			t.Fatalf("submit = %v %s", a.Status, a.Outcome)
		}
	}
	if n := f.Calls(); n != 4 {
		t.Errorf("forwards = %d, want 4: part 2 of the second message was taken for a retry of part 2 of the first and never sent", n)
	}
}
