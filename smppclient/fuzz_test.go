package smppclient

import (
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// FuzzMessageID feeds response bodies from a hostile upstream to the
// decoder the reader uses; it must never panic.
func FuzzMessageID(f *testing.F) {
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte("id-1\x00"))
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte("no-nul"))
	f.Add(smpp.CmdDataSM|smpp.RespBit, []byte("x\x00\x04\x24\x00\x02ab"))
	f.Add(smpp.CmdQuerySM|smpp.RespBit, []byte("id\x00\x00\x02"))
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte{})
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte("\x00"))
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte("id\x00\x00"))
	f.Add(smpp.CmdDataSM|smpp.RespBit, []byte("abc\x00"))
	f.Add(smpp.CmdSubmitSM|smpp.RespBit, []byte("id\x00\x14\x00\x00\x01k"))
	f.Fuzz(func(t *testing.T, id uint32, body []byte) {
		frame := smpp.EncodeSimple(id, smpp.StatusOK, 1, body)
		id2 := messageID(frame)
		if len(id2) > len(body) {
			t.Errorf("messageID = %q, longer than the body", id2)
		}
		if id&smpp.RespBit == 0 {
			return
		}
		want := decodeMessageID(frame)
		switch id &^ smpp.RespBit {
		case smpp.CmdSubmitSM, smpp.CmdDataSM:
			if want == "" { // gosmpp cannot decode it: the string the body begins with
				want, _, _ = strings.Cut(string(body), "\x00")
			}
		case smpp.CmdQuerySM:
		default:
			return
		}
		if id2 != want {
			t.Errorf("messageID(0x%08X %q) = %q, want %q", id, body, id2, want)
		}
	})
}
