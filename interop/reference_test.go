package interop

import (
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"

	"github.com/smppproxy/smppproxy/config"
)

// A client library that can set only the standard user_message_reference
// (fiorix go-smpp here, as Kannel, jSMPP, smpplib and node smpp can) gets
// exactly-once under idempotency.key: reference: its retry with the same
// reference and text is replayed, another reference or other text under a
// wrapped reference is a new message.
func TestFiorixUserMessageReferenceAsTheKey(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	cfg := testConfig(t, smsc.Addr())
	cfg.Accounts[0].Idempotency.Key = config.KeyReference
	cfg.Accounts[0].Idempotency.FingerprintWindow = config.Duration(time.Minute)
	app := startProxy(t, cfg)
	tc := dialFiorix(t, app.Addr(), nil)
	send := func(ref byte, text string) string {
		t.Helper()
		sm := &fsmpp.ShortMessage{Src: "SHOP", Dst: "447700900123", Text: pdutext.Raw(text),
			TLVFields: pdutlv.Fields{pdutlv.TagUserMessageReference: []byte{0x00, ref}}}
		got, err := tc.Submit(sm)
		if err != nil {
			t.Fatalf("submit ref %d %q: %v", ref, text, err)
		}
		return got.RespID()
	}
	first := send(7, "your code is 1234")
	if again := send(7, "your code is 1234"); again != first {
		t.Errorf("retry with the same reference and text got id %q, want %q", again, first)
	}
	smsc.wantSubmits(t, 1)
	send(8, "your code is 1234")
	send(7, "your code is 9876")
	subs := smsc.wantSubmits(t, 3)
	if ref := subs[2].tlvs[pdutlv.TagUserMessageReference]; len(ref) != 2 || ref[1] != 7 {
		t.Errorf("user_message_reference at the SMSC = % X, want 00 07 (forwarded as sent)", ref)
	}
}
