package smpp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/linxGnu/gosmpp/pdu"
)

// HeaderLen is the size of an SMPP PDU header.
const HeaderLen = 16

// DefaultMaxPDUSize is the default upper bound for command_length.
const DefaultMaxPDUSize = 64 << 10

// Command ids used directly by the proxy.
const (
	CmdGenericNack     uint32 = 0x80000000
	CmdBindReceiver    uint32 = 0x00000001
	CmdBindTransmitter uint32 = 0x00000002
	CmdQuerySM         uint32 = 0x00000003
	CmdSubmitSM        uint32 = 0x00000004
	CmdDeliverSM       uint32 = 0x00000005
	CmdUnbind          uint32 = 0x00000006
	CmdReplaceSM       uint32 = 0x00000007
	CmdCancelSM        uint32 = 0x00000008
	CmdBindTransceiver uint32 = 0x00000009
	CmdOutbind         uint32 = 0x0000000B
	CmdEnquireLink     uint32 = 0x00000015
	CmdSubmitMulti     uint32 = 0x00000021
	CmdAlertNotif      uint32 = 0x00000102
	CmdDataSM          uint32 = 0x00000103
	RespBit            uint32 = 0x80000000
)

// Header is an SMPP PDU header.
type Header struct {
	Length   uint32
	ID       uint32
	Status   Status
	Sequence uint32
}

// IsResponse reports whether the command id has the response bit set.
func (h Header) IsResponse() bool { return h.ID&RespBit != 0 }

// ParseHeader decodes the first 16 bytes of b.
func ParseHeader(b []byte) Header {
	return Header{
		Length:   binary.BigEndian.Uint32(b[0:]),
		ID:       binary.BigEndian.Uint32(b[4:]),
		Status:   Status(binary.BigEndian.Uint32(b[8:])),
		Sequence: binary.BigEndian.Uint32(b[12:]),
	}
}

// PutHeader encodes h into the first 16 bytes of b.
func PutHeader(b []byte, h Header) {
	binary.BigEndian.PutUint32(b[0:], h.Length)
	binary.BigEndian.PutUint32(b[4:], h.ID)
	binary.BigEndian.PutUint32(b[8:], uint32(h.Status))
	binary.BigEndian.PutUint32(b[12:], h.Sequence)
}

// ErrBadLength is returned by ReadFrame for a command_length below 16 or
// above the limit. The header (with its sequence number) is in the
// *LengthError; the stream cannot be resynchronised afterwards.
var ErrBadLength = errors.New("smpp: invalid command_length")

// LengthError carries the header of a PDU whose length was refused.
type LengthError struct{ Header Header }

func (e *LengthError) Error() string {
	return fmt.Sprintf("smpp: invalid command_length %d (command 0x%08X, sequence %d)", e.Header.Length, e.Header.ID, e.Header.Sequence)
}

// Unwrap makes errors.Is(err, ErrBadLength) true.
func (e *LengthError) Unwrap() error { return ErrBadLength }

// ReadFrame reads one whole PDU (header included) from r. maxSize <= 0 means
// DefaultMaxPDUSize. A stream that ends inside a PDU returns
// io.ErrUnexpectedEOF (io.EOF when it ends cleanly between PDUs). From a
// *bufio.Reader it reads the header in place, allocating only the frame.
func ReadFrame(r io.Reader, maxSize int) ([]byte, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxPDUSize
	}
	if br, ok := r.(*bufio.Reader); ok {
		return readBuffered(br, maxSize)
	}
	var hb [HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h := ParseHeader(hb[:])
	if h.Length < HeaderLen || h.Length > uint32(maxSize) {
		return nil, &LengthError{Header: h}
	}
	buf := make([]byte, h.Length)
	copy(buf, hb[:])
	if _, err := io.ReadFull(r, buf[HeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// FrameBuffered reports whether br holds a whole frame (or at least a
// header whose length ReadFrame refuses without reading on): ReadFrame
// from br will then not read from the connection, so a read deadline
// set for it would not count.
func FrameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < HeaderLen {
		return false
	}
	hb, _ := br.Peek(HeaderLen)
	return int(binary.BigEndian.Uint32(hb)) <= n
}

// readBuffered is ReadFrame from a buffered reader: the header is peeked
// (no copy of it escapes), then the whole frame read into its buffer.
// Errors are ReadFrame's.
func readBuffered(br *bufio.Reader, maxSize int) ([]byte, error) {
	hb, err := br.Peek(HeaderLen)
	if err != nil {
		if len(hb) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	h := ParseHeader(hb)
	if h.Length < HeaderLen || h.Length > uint32(maxSize) {
		_, _ = br.Discard(HeaderLen)
		return nil, &LengthError{Header: h}
	}
	buf := make([]byte, h.Length)
	if _, err := io.ReadFull(br, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// Marshal encodes a gosmpp PDU to bytes.
func Marshal(p pdu.PDU) []byte {
	b := pdu.NewBuffer(make([]byte, 0, 64))
	p.Marshal(b)
	return b.Bytes()
}

// ErrUndecodable is returned (wrapped) by Decode and Guard when gosmpp
// panicked on the bytes it was given.
var ErrUndecodable = errors.New("smpp: undecodable PDU")

// Guard runs fn, a gosmpp call on bytes from a peer, and turns a panic in
// it into an error wrapping ErrUndecodable: gosmpp v0.3.1 panics on some
// inputs (a query_sm with TLVs writes to a nil map), and no peer may crash
// the proxy.
func Guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrUndecodable, r)
		}
	}()
	return fn()
}

// Decode parses one whole frame (as returned by ReadFrame) with gosmpp; it
// never panics (see Guard).
func Decode(frame []byte) (pdu.PDU, error) {
	var p pdu.PDU
	err := Guard(func() (e error) {
		p, e = decode(frame)
		return e
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func decode(frame []byte) (pdu.PDU, error) {
	h := ParseHeader(frame)
	p, err := pdu.CreatePDUFromCmdID(gosmppCmd(h.ID))
	if err != nil {
		return nil, err
	}
	if err := p.Unmarshal(pdu.NewBuffer(frame)); err != nil {
		return nil, err
	}
	return p, nil
}

// EncodeSimple builds a PDU whose body is body (may be nil).
func EncodeSimple(id uint32, status Status, seq uint32, body []byte) []byte {
	b := make([]byte, HeaderLen+len(body))
	PutHeader(b, Header{Length: uint32(len(b)), ID: id, Status: status, Sequence: seq})
	copy(b[HeaderLen:], body)
	return b
}

// GenericNack encodes a generic_nack.
func GenericNack(status Status, seq uint32) []byte {
	return EncodeSimple(CmdGenericNack, status, seq, nil)
}

// SubmitResp encodes a submit_sm_resp. An error status carries an empty
// message_id field (an explicit NUL), which every SMPP 3.4 peer accepts.
func SubmitResp(status Status, seq uint32, messageID string) []byte {
	b := make([]byte, HeaderLen+len(messageID)+1)
	PutHeader(b, Header{Length: uint32(len(b)), ID: CmdSubmitSM | RespBit, Status: status, Sequence: seq})
	copy(b[HeaderLen:], messageID)
	return b
}

// HasResponse reports whether the request command id has a *_resp; for the
// ones that do not (alert_notification, outbind, generic_nack) errors are
// reported with generic_nack.
func HasResponse(id uint32) bool {
	switch id {
	case CmdAlertNotif, CmdOutbind, CmdGenericNack:
		return false
	}
	return id&RespBit == 0
}

// Known reports whether id is an SMPP v3.4/v5 command id the proxy knows
// (those gosmpp's pdu package decodes). It is asked for every request, so
// the answer comes from a set built once.
func Known(id uint32) bool { return knownIDs[id] }

// knownIDs probes gosmpp once over every request id it could know
// (0x000–0x3FF), with and without the response bit.
var knownIDs = func() map[uint32]bool {
	m := map[uint32]bool{}
	for id := uint32(0); id < 0x400; id++ {
		for _, c := range []uint32{id, id | RespBit} {
			if _, err := pdu.CreatePDUFromCmdID(gosmppCmd(c)); err == nil {
				m[c] = true
			}
		}
	}
	return m
}()
