package dedup

import (
	"github.com/smppproxy/smppproxy/config"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

func umr(n uint16) smpp.TLV {
	return smpp.TLV{Tag: smpp.TagUserMessageReference, Value: []byte{byte(n >> 8), byte(n)}}
}

func TestReferencePolicyDeduplicatesTheSameReferenceAndContent(t *testing.T) {
	f := &fakeForwarder{}
	e, _, clk := newEngine(t, f)
	p := Policy{Key: config.KeyReference, FingerprintWindow: time.Minute}
	first := e.Submit(ctx, "shop", p, submit(t, "", "your code is 1234", umr(7)))
	again := e.Submit(ctx, "shop", p, submit(t, "", "your code is 1234", umr(7)))
	if first.Outcome != OutForwarded || again.Outcome != OutReplayed || again.MessageID != first.MessageID || f.count() != 1 {
		t.Fatalf("same reference and content: %s then {%s %q}, %d forwards; want forwarded then replayed with %q, 1 forward",
			first.Outcome, again.Outcome, again.MessageID, f.count(), first.MessageID)
	}
	// The same content under another reference is a message sent on purpose.
	other := e.Submit(ctx, "shop", p, submit(t, "", "your code is 1234", umr(8)))
	if other.Outcome != OutForwarded || f.count() != 2 {
		t.Errorf("same content, other reference = %s with %d forwards, want forwarded (2)", other.Outcome, f.count())
	}
	// The reference wraps: reused with other content it is a new message,
	// never a conflict.
	reused := e.Submit(ctx, "shop", p, submit(t, "", "your code is 9876", umr(7)))
	if reused.Outcome != OutForwarded || f.count() != 3 {
		t.Errorf("reused reference, other content = %s with %d forwards, want forwarded (3), not a conflict", reused.Outcome, f.count())
	}
	// Past the fingerprint window, a repeat is a new operation.
	clk.Advance(2 * time.Minute)
	late := e.Submit(ctx, "shop", p, submit(t, "", "your code is 1234", umr(7)))
	if late.Outcome != OutForwarded || f.count() != 4 {
		t.Errorf("repeat past the window = %s with %d forwards, want forwarded (4)", late.Outcome, f.count())
	}
}

func TestReferencePolicyWithoutTheTLVFollowsMissingKey(t *testing.T) {
	f := &fakeForwarder{}
	e, _, _ := newEngine(t, f)
	bad := e.Submit(ctx, "shop", Policy{Key: config.KeyReference}, submit(t, "", "x", smpp.TLV{Tag: smpp.TagUserMessageReference, Value: []byte{1}}))
	if bad.Status != smpp.StatusInvTLVVal {
		t.Errorf("a one-octet user_message_reference = %v, want ESME_RINVTLVVAL", bad.Status)
	}
	if a := e.Submit(ctx, "shop", Policy{Key: config.KeyReference, MissingKey: config.MissingReject}, submit(t, "", "x")); a.Status != smpp.StatusMissingTLV {
		t.Errorf("no reference under missing_key: reject = %v, want ESME_RMISSINGTLV", a.Status)
	}
	p := Policy{Key: config.KeyReference, MissingKey: config.MissingFingerprint, FingerprintWindow: time.Minute}
	e.Submit(ctx, "shop", p, submit(t, "", "no ref"))
	if a := e.Submit(ctx, "shop", p, submit(t, "", "no ref")); a.Outcome != OutReplayed {
		t.Errorf("no reference under missing_key: fingerprint, repeated = %s, want replayed", a.Outcome)
	}
}
