package interop

import (
	"bytes"
	"fmt"
	"testing"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"
)

// fiorix writes TLVs from a Go map, so in a random order: the key may
// come first, last or between the others. Whatever the order, the key is
// stripped and every other TLV reaches smpptest intact.
func TestFiorixTLVOrder(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	app := startProxy(t, testConfig(t, smsc.Addr()))
	tc := dialFiorix(t, app.Addr(), nil)
	const n = 20
	for i := range n {
		sm := keyed(fmt.Sprintf("tlv-%02d", i), pdutext.Raw(fmt.Sprintf("text %02d", i)))
		sm.Register = 0
		sm.TLVFields[pdutlv.TagUserMessageReference] = []byte{0x00, byte(i)}
		sm.TLVFields[pdutlv.TagSourcePort] = []byte{0x1F, 0x90}
		sm.TLVFields[pdutlv.TagCallbackNum] = []byte("\x00\x01\x01447700900999")
		if _, err := tc.Submit(sm); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	subs := smsc.wantSubmits(t, n)
	for _, s := range subs {
		var i int
		if _, err := fmt.Sscanf(string(s.shortMessage), "text %02d", &i); err != nil {
			t.Errorf("short_message %q reached smpptest", s.shortMessage)
			continue
		}
		want := map[pdutlv.Tag][]byte{
			pdutlv.TagUserMessageReference: {0x00, byte(i)},
			pdutlv.TagSourcePort:           {0x1F, 0x90},
			pdutlv.TagCallbackNum:          []byte("\x00\x01\x01447700900999"),
		}
		if len(s.tlvs) != len(want) {
			t.Errorf("submit %d reached smpptest with TLVs %v, want %v", i, s.tlvs, want)
			continue
		}
		for tag, v := range want {
			if !bytes.Equal(s.tlvs[tag], v) {
				t.Errorf("submit %d: TLV 0x%04X % X at smpptest, want % X", i, uint16(tag), s.tlvs[tag], v)
			}
		}
	}
}

// A message split with the sar_* TLVs (fiorix sets them as plain TLVs, in
// random order next to the key): one record per segment, a retry with a
// new sar_msg_ref_num is replayed part by part, the sar TLVs reach
// smpptest as sent.
func TestFiorixSARSegments(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	app := startProxy(t, testConfig(t, smsc.Addr()))
	tc := dialFiorix(t, app.Addr(), nil)
	part := func(ref uint16, seq int) *fsmpp.ShortMessage {
		sm := keyed("sar-1", pdutext.Raw(fmt.Sprintf("part %d of 3", seq)))
		sm.Register = 0
		sm.TLVFields[pdutlv.TagSarMsgRefNum] = []byte{byte(ref >> 8), byte(ref)}
		sm.TLVFields[pdutlv.TagSarTotalSegments] = uint8(3)
		sm.TLVFields[pdutlv.TagSarSegmentSeqnum] = uint8(seq)
		return sm
	}
	ids := map[int]string{}
	for seq := 1; seq <= 3; seq++ {
		sm, err := tc.Submit(part(0x0A0B, seq))
		if err != nil {
			t.Fatalf("part %d: %v", seq, err)
		}
		ids[seq] = sm.RespID()
	}
	if ids[1] == ids[2] || ids[2] == ids[3] || ids[1] == ids[3] {
		t.Fatalf("the parts got ids %v, want 3 distinct", ids)
	}
	for seq := 1; seq <= 3; seq++ { // re-split by the client: a new reference
		sm, err := tc.Submit(part(0x0C0D, seq))
		if err != nil {
			t.Fatalf("retry of part %d: %v", seq, err)
		}
		if sm.RespID() != ids[seq] {
			t.Errorf("retry of part %d got %q, want %q", seq, sm.RespID(), ids[seq])
		}
	}
	// Other content for a part: conflict.
	other := part(0x0A0B, 2)
	other.Text = pdutext.Raw("part 2 changed")
	_, err := tc.Submit(other)
	wantStatus(t, err, 0x400, "part 2 with other text")
	subs := smsc.wantSubmits(t, 3)
	for i, s := range subs {
		seq := i + 1
		if !bytes.Equal(s.tlvs[pdutlv.TagSarMsgRefNum], []byte{0x0A, 0x0B}) ||
			!bytes.Equal(s.tlvs[pdutlv.TagSarTotalSegments], []byte{3}) ||
			!bytes.Equal(s.tlvs[pdutlv.TagSarSegmentSeqnum], []byte{byte(seq)}) {
			t.Errorf("part %d reached smpptest with TLVs %v", seq, s.tlvs)
		}
		if _, ok := s.tlvs[keyTag]; ok {
			t.Errorf("part %d reached smpptest with the key TLV", seq)
		}
	}
}

// message_payload (0x0424) with an empty short_message: the payload is
// the user data — forwarded intact, and part of the fingerprint (other
// payload, same key → 0x400).
func TestFiorixMessagePayload(t *testing.T) {
	smsc := startFiorixSMSC(t, smscOptions{})
	app := startProxy(t, testConfig(t, smsc.Addr()))
	tc := dialFiorix(t, app.Addr(), nil)
	payload := bytes.Repeat([]byte("payload "), 40) // 320 octets: too long for short_message
	msg := func(p []byte) *fsmpp.ShortMessage {
		sm := keyed("mp-1", pdutext.Raw(nil))
		sm.Register = 0
		sm.TLVFields[pdutlv.TagMessagePayload] = p
		return sm
	}
	sm, err := tc.Submit(msg(payload))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if sm2, err := tc.Submit(msg(payload)); err != nil || sm2.RespID() != sm.RespID() {
		t.Errorf("retry: %v, id %q; want %q", err, sm2.RespID(), sm.RespID())
	}
	changed := append(bytes.Clone(payload[:len(payload)-1]), '!')
	_, err = tc.Submit(msg(changed))
	wantStatus(t, err, 0x400, "other payload, same key")
	subs := smsc.wantSubmits(t, 1)
	if got := subs[0].tlvs[pdutlv.TagMessagePayload]; !bytes.Equal(got, payload) {
		t.Errorf("message_payload at smpptest: %d octets, want the %d sent", len(got), len(payload))
	}
	if len(subs[0].shortMessage) != 0 {
		t.Errorf("short_message at smpptest % X, want empty", subs[0].shortMessage)
	}
}
