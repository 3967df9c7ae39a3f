package esme

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smppproxy/smppproxy/smpp"
)

// Submit is one submit_sm. Zero values give an SMPP default (TON/NPI 0,
// no receipt, data_coding 0).
type Submit struct {
	ServiceType    string
	SrcTON, SrcNPI byte
	Src            string
	DstTON, DstNPI byte
	Dst            string
	// Text is the user data after UDH. More than 254 octets (UDH included)
	// are sent in message_payload with an empty short_message.
	Text []byte
	// UDH, when set, is prepended to Text and sets esm_class bit 0x40.
	UDH []byte
	// Key is sent in the TLV KeyTag (default 0x1400), as is (no NUL);
	// omitted when "".
	Key    string
	KeyTag uint16
	// RegisteredDelivery 1 asks for a delivery receipt.
	RegisteredDelivery byte
	EsmClass           byte
	ProtocolID         byte
	PriorityFlag       byte
	DataCoding         byte
	// ScheduleDeliveryTime and ValidityPeriod in SMPP time format; "" = none.
	ScheduleDeliveryTime, ValidityPeriod string
	// TLVs are appended after the key TLV, in order.
	TLVs []smpp.TLV
	// Seq is the sequence number to use; 0 = the client's next free one.
	Seq uint32
}

// Resp is the answer to a submit_sm: a submit_sm_resp, or a generic_nack
// (Nack) carrying its sequence number.
type Resp struct {
	Status    smpp.Status
	MessageID string
	Seq       uint32
	Nack      bool
	// Frame is the whole response PDU.
	Frame []byte
}

// Result is what SubmitAsync delivers.
type Result struct {
	Resp Resp
	Err  error
}

// Body encodes the submit_sm body (everything after the header).
func (s Submit) Body() []byte { return s.appendBody(nil) }

// appendBody appends the submit_sm body to b (which, when nil, is made
// with room for it).
func (s Submit) appendBody(b []byte) []byte {
	ud := s.Text
	esm := s.EsmClass
	if len(s.UDH) > 0 {
		ud = append(append(make([]byte, 0, len(s.UDH)+len(s.Text)), s.UDH...), s.Text...)
		esm |= 0x40
	}
	if b == nil {
		b = make([]byte, 0, s.bodySize())
	}
	b = cstr(b, s.ServiceType)
	b = append(b, s.SrcTON, s.SrcNPI)
	b = cstr(b, s.Src)
	b = append(b, s.DstTON, s.DstNPI)
	b = cstr(b, s.Dst)
	b = append(b, esm, s.ProtocolID, s.PriorityFlag)
	b = cstr(b, s.ScheduleDeliveryTime)
	b = cstr(b, s.ValidityPeriod)
	b = append(b, s.RegisteredDelivery, 0, s.DataCoding, 0) // replace_if_present, sm_default_msg_id
	payload := len(ud) > 254
	if payload {
		b = append(b, 0)
	} else {
		b = append(b, byte(len(ud)))
		b = append(b, ud...)
	}
	if s.Key != "" {
		tag := s.KeyTag
		if tag == 0 {
			tag = smpp.DefaultIdempotencyTag
		}
		b = appendTLV(b, tag, []byte(s.Key))
	}
	if payload {
		b = appendTLV(b, smpp.TagMessagePayload, ud)
	}
	for _, t := range s.TLVs {
		b = appendTLV(b, t.Tag, t.Value)
	}
	return b
}

// bodySize is a size the body fits in without growing, short TLVs aside.
func (s Submit) bodySize() int {
	return 48 + len(s.ServiceType) + len(s.Src) + len(s.Dst) + len(s.UDH) + len(s.Text) + len(s.Key)
}

// Frame encodes the whole submit_sm with sequence number seq.
func (s Submit) Frame(seq uint32) []byte {
	b := s.appendBody(make([]byte, smpp.HeaderLen, smpp.HeaderLen+s.bodySize()))
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdSubmitSM, Sequence: seq})
	return b
}

// withSeq sets the sequence number of frame and returns it.
func withSeq(frame []byte, seq uint32) []byte {
	binary.BigEndian.PutUint32(frame[12:], seq)
	return frame
}

func appendTLV(b []byte, tag uint16, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, tag)
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// Submit sends s (waiting for a window slot first) and waits for its
// response within Options.Timeout and ctx. A response with an error status
// is not an error: see Resp.Status. On ErrTimeout the submit may still
// have been accepted by the peer.
func (c *Client) Submit(ctx context.Context, s Submit) (Resp, error) {
	req := s.Frame(0)
	cl, err := c.start(ctx, s.Seq, true, func(seq uint32) []byte { return withSeq(req, seq) })
	if err != nil {
		return Resp{Seq: s.Seq}, err
	}
	resp, err := c.wait(ctx, cl)
	if err != nil {
		return Resp{Seq: cl.seq}, err
	}
	return parseSubmitResp(resp)
}

// SubmitAsync waits for a window slot, queues s and returns at once; the
// channel receives exactly one Result. Calling it in a loop keeps the
// window full (a pipelined sender).
func (c *Client) SubmitAsync(ctx context.Context, s Submit) <-chan Result {
	ch := make(chan Result, 1)
	req := s.Frame(0)
	cl, err := c.start(ctx, s.Seq, true, func(seq uint32) []byte { return withSeq(req, seq) })
	if err != nil {
		ch <- Result{Resp: Resp{Seq: s.Seq}, Err: err}
		return ch
	}
	go func() {
		frame, err := c.wait(ctx, cl)
		if err != nil {
			ch <- Result{Resp: Resp{Seq: cl.seq}, Err: err}
			return
		}
		r, err := parseSubmitResp(frame)
		ch <- Result{Resp: r, Err: err}
	}()
	return ch
}

func parseSubmitResp(frame []byte) (Resp, error) {
	h := smpp.ParseHeader(frame)
	r := Resp{Status: h.Status, Seq: h.Sequence, Frame: frame}
	switch h.ID {
	case smpp.CmdGenericNack:
		r.Nack = true
		return r, nil
	case smpp.CmdSubmitSM | smpp.RespBit:
	default:
		return r, fmt.Errorf("esme: sequence %d answered with command 0x%08X", h.Sequence, h.ID)
	}
	id, _, _ := cutCString(frame[smpp.HeaderLen:])
	r.MessageID = string(id)
	return r, nil
}

// IsStatus reports whether err carries the SMPP status st (a refused bind,
// for instance).
func IsStatus(err error, st smpp.Status) bool {
	var got smpp.Status
	return errors.As(err, &got) && got == st
}
