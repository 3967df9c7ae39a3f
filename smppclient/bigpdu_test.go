package smppclient

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// The largest deliver_sm SMPP allows (a message_payload of 65,535 octets,
// more than 64 KiB with its header and fields) is taken like any other:
// it does not close the session as a protocol error, which made the SMSC
// send it again after every bind and each time cost the submits in
// flight their answers.
func TestTheLargestLegalDeliverSMIsTaken(t *testing.T) {
	f := startFake(t)
	got := make(chan int, 1)
	p := newPool(t, f.addr, func(c *Config) {
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			got <- len(d.Frame)
			return smpp.StatusOK
		}
	})
	waitUp(t, p, 1)
	body := append([]byte(nil), deliverBody[:len(deliverBody)-3]...) // up to sm_length
	body = append(body, 0)                                           // sm_length 0: the text is in message_payload
	body = binary.BigEndian.AppendUint16(body, 0x0424)
	body = binary.BigEndian.AppendUint16(body, 65535)
	body = append(body, make([]byte, 65535)...)
	frame := smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 900, body)
	if len(frame) <= smpp.DefaultMaxPDUSize {
		t.Fatalf("frame of %d octets, want one over %d", len(frame), smpp.DefaultMaxPDUSize)
	}
	f.lastConn().write(frame)
	select {
	case n := <-got:
		if n != len(frame) {
			t.Errorf("OnDeliver got %d octets, want %d", n, len(frame))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the deliver_sm of %d octets never reached OnDeliver (closed sessions: %v)", len(frame), p.Stats().Closed)
	}
	if h := recvFromClient(t, f); h.ID != smpp.CmdDeliverSM|smpp.RespBit || h.Sequence != 900 || h.Status != smpp.StatusOK {
		t.Errorf("the SMSC got 0x%08X seq %d status %v, want deliver_sm_resp 900 status 0", h.ID, h.Sequence, h.Status)
	}
	if st := p.Stats(); st.Closed[ReasonProtocolError] != 0 {
		t.Errorf("sessions closed as protocol errors: %d, want 0", st.Closed[ReasonProtocolError])
	}
}
