// Package smppserver is the ESME-facing SMPP server: listener, bind and
// authentication, one reader and one writer goroutine per session, windowed
// concurrent request handling, enquire_link both ways, the bind timeout,
// connection caps (total and per source address) and graceful Shutdown.
// Before bind a session reads at most MaxUnboundPDUSize per PDU and holds
// only small buffers. Requests other than session management (bind, unbind,
// enquire_link) are handed to a Handler, in the manner of net/http and
// miekg/dns; Middleware composes handlers into the proxy's request chain.
package smppserver

import (
	"context"

	"github.com/smppproxy/smppproxy/smpp"
)

// Request is one request PDU received on a bound session.
type Request struct {
	Header smpp.Header
	// Frame is the whole PDU as received (header included). Handlers may
	// keep it; the server does not reuse it.
	Frame   []byte
	Session *Session
}

// ResponseWriter answers one Request. Exactly one response is sent per
// request: the first Write wins and later ones return ErrAlreadyWritten.
// If a handler returns without writing, the server answers with the
// request's *_resp and ESME_RSYSERR (0x08), and counts it.
type ResponseWriter interface {
	// WriteFrame queues a complete response PDU. Its sequence number must
	// be the request's.
	WriteFrame(frame []byte) error
	// WriteStatus answers with the request's own *_resp (generic_nack for
	// commands that have none) carrying status and an empty body; for
	// submit_sm an empty message_id.
	WriteStatus(status smpp.Status) error
	// Written reports whether a response has been written.
	Written() bool
}

// Handler serves requests. ServeSMPP runs in its own goroutine, at most the
// session's window of them at a time.
type Handler interface {
	ServeSMPP(ctx context.Context, w ResponseWriter, r *Request)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, w ResponseWriter, r *Request)

// ServeSMPP calls f.
func (f HandlerFunc) ServeSMPP(ctx context.Context, w ResponseWriter, r *Request) { f(ctx, w, r) }

// Middleware wraps a Handler (CoreDNS plugin style).
type Middleware func(Handler) Handler

// Chain returns h wrapped by m, the first middleware outermost.
func Chain(h Handler, m ...Middleware) Handler {
	for i := len(m) - 1; i >= 0; i-- {
		h = m[i](h)
	}
	return h
}

// RespFor returns the response command id for a request id and whether the
// command has a response at all.
func RespFor(id uint32) (uint32, bool) {
	if !smpp.HasResponse(id) {
		return smpp.CmdGenericNack, false
	}
	return id | smpp.RespBit, true
}

// StatusResponse encodes the answer to a request header with status and an
// empty body (submit_sm and data_sm carry an empty message_id).
func StatusResponse(h smpp.Header, status smpp.Status) []byte {
	id, ok := RespFor(h.ID)
	if !ok {
		return smpp.GenericNack(status, h.Sequence)
	}
	switch h.ID {
	case smpp.CmdSubmitSM, smpp.CmdDataSM, smpp.CmdDeliverSM,
		smpp.CmdBindReceiver, smpp.CmdBindTransmitter, smpp.CmdBindTransceiver:
		// An empty message_id / system_id C-Octet string.
		return smpp.EncodeSimple(id, status, h.Sequence, []byte{0})
	}
	return smpp.EncodeSimple(id, status, h.Sequence, nil)
}
