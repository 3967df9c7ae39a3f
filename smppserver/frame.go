package smppserver

import (
	"errors"
	"io"
	"slices"

	"github.com/smppproxy/smppproxy/smpp"
)

// MaxUnboundPDUSize bounds command_length before a session is bound
// (any bind fits in a few hundred bytes); MaxPDUSize applies after bind.
const MaxUnboundPDUSize = 1024

// firstChunk is the buffer a frame starts with; it doubles as the body
// arrives, up to command_length.
const firstChunk = 512

// readFrame is smpp.ReadFrame that does not allocate command_length at
// once: the buffer starts at firstChunk bytes and grows as the body
// arrives, so a header announcing a large PDU costs only what has come of
// it.
func readFrame(r io.Reader, maxSize int) ([]byte, error) {
	var hb [smpp.HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h := smpp.ParseHeader(hb[:])
	if h.Length < smpp.HeaderLen || h.Length > uint32(maxSize) {
		return nil, &smpp.LengthError{Header: h}
	}
	n := int(h.Length)
	buf := make([]byte, smpp.HeaderLen, min(n, firstChunk))
	copy(buf, hb[:])
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n, 2*cap(buf))-len(buf))
		}
		end := min(n, cap(buf))
		m, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}
