package smppclient

import (
	"errors"
	"fmt"
)

// Errors returned by Submit; compare with errors.Is.
var (
	// ErrNotSent: nothing of the request was written. It wraps the cause:
	// ErrNoSession, ErrBusy, ErrClosed, the beforeWrite error, the context
	// error, or the write error.
	ErrNotSent = errors.New("smppclient: not sent")
	// ErrNoSession: no bound transmitting session within RouteWait.
	ErrNoSession = errors.New("smppclient: no bound session")
	// ErrBusy: sessions are bound but every window was full, or the
	// throughput cap left no token, for RouteWait.
	ErrBusy = errors.New("smppclient: all sessions busy")
	// ErrClosed: the pool is closed.
	ErrClosed = errors.New("smppclient: pool closed")
	// ErrTimeout: the request was written and no response came within
	// ResponseTimeout. The outcome is unknown.
	ErrTimeout = errors.New("smppclient: response timeout")
	// ErrSessionLost: the session closed after the request was (possibly)
	// written and before its response. The outcome is unknown.
	ErrSessionLost = errors.New("smppclient: session lost")
	// ErrBadAnswer: the upstream accepted the request with a message id
	// longer than MaxMessageIDLen, which breaks SMPP after the request
	// reached it. The outcome is unknown: the request was delivered, and
	// the id cannot be kept (no store index holds keys of any length).
	ErrBadAnswer = errors.New("smppclient: acceptance with an overlong message id")
	// ErrUnclearAnswer: a generic_nack came for the request that may not
	// answer it (status 0, or 0x08 with the sequence number of a response
	// the bind sent the SMSC lately, which the SMSC may have nacked). The
	// outcome is unknown.
	ErrUnclearAnswer = errors.New("smppclient: generic_nack that may not answer the request")
)

// MaxMessageIDLen is the longest message id an acceptance may carry.
// SMPP allows 64 octets (65 with the NUL); some SMSCs exceed that a
// little, so up to 255 are taken.
const MaxMessageIDLen = 255

// errSessionClosed is the cause wrapped in ErrNotSent when the chosen
// session closed before the request reached the socket.
var errSessionClosed = errors.New("smppclient: session closed before the write")

// Ambiguous reports whether err leaves the outcome of a Submit unknown: the
// request was or may have been written and no usable response was
// received.
func Ambiguous(err error) bool {
	if err == nil || errors.Is(err, ErrNotSent) {
		return false
	}
	return errors.Is(err, ErrTimeout) || errors.Is(err, ErrSessionLost) || errors.Is(err, ErrBadAnswer) || errors.Is(err, ErrUnclearAnswer)
}

func notSent(cause error) error {
	return fmt.Errorf("%w: %w", ErrNotSent, cause)
}

// CloseReason is the one reason a session closed. Its String is used in
// logs and as a metric label; MarshalText writes it, so text and JSON log
// handlers print "peer_closed", never a number.
type CloseReason int

// Close reasons.
const (
	ReasonNone          CloseReason = iota
	ReasonPoolClosed                // Pool.Close
	ReasonPeerClosed                // the upstream closed the connection
	ReasonPeerUnbind                // the upstream sent unbind
	ReasonIdleTimeout               // nothing received for 3×EnquireLink
	ReasonReadError                 // a read failed
	ReasonWriteError                // a write failed or timed out
	ReasonProtocolError             // an invalid command_length
	reasonCount
)

var reasonNames = [...]string{
	ReasonNone:          "none",
	ReasonPoolClosed:    "pool_closed",
	ReasonPeerClosed:    "peer_closed",
	ReasonPeerUnbind:    "peer_unbind",
	ReasonIdleTimeout:   "idle_timeout",
	ReasonReadError:     "read_error",
	ReasonWriteError:    "write_error",
	ReasonProtocolError: "protocol_error",
}

func (r CloseReason) String() string {
	if r >= 0 && r < reasonCount {
		return reasonNames[r]
	}
	return fmt.Sprintf("CloseReason(%d)", int(r))
}

// MarshalText writes the name.
func (r CloseReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a name written by MarshalText.
func (r *CloseReason) UnmarshalText(text []byte) error {
	for v := ReasonNone; v < reasonCount; v++ {
		if reasonNames[v] == string(text) {
			*r = v
			return nil
		}
	}
	return fmt.Errorf("smppclient: unknown close reason %q", text)
}
