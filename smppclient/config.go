package smppclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/smppproxy/smppproxy/internal/clock"
	"github.com/smppproxy/smppproxy/smpp"
)

// State is where a session is in its life, as SessionInfo reports it.
// MarshalText writes String ("connecting", "bound", "closed"), the value
// of the admin API's state field and of the sessions metric's state label.
type State uint8

// Session states.
const (
	StateConnecting State = iota
	StateBound
	StateClosed
	stateCount
)

var stateNames = [...]string{
	StateConnecting: "connecting",
	StateBound:      "bound",
	StateClosed:     "closed",
}

// String is the state's name.
func (s State) String() string {
	if s < stateCount {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText writes the name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name written by MarshalText.
func (s *State) UnmarshalText(text []byte) error {
	for v := StateConnecting; v < stateCount; v++ {
		if stateNames[v] == string(text) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("smppclient: unknown session state %q", text)
}

// Defaults applied by New to zero fields of Config.
const (
	DefaultBinds           = 1
	DefaultWindow          = 10
	DefaultDeliverWindow   = 1000
	DefaultResponseTimeout = 10 * time.Second
	DefaultRouteWait       = 2 * time.Second
	DefaultEnquireLink     = 30 * time.Second
	DefaultRebindMin       = 500 * time.Millisecond
	DefaultRebindMax       = 30 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultUnbindWait      = time.Second
	DefaultStableAfter     = time.Minute
)

// Throttle back-off: after an ESME_RTHROTTLED answer a session takes no new
// request for a pause that doubles from throttleMin up to throttleMax while
// the upstream keeps answering 0x58, and resets on any other answer.
const (
	throttleMin = 100 * time.Millisecond
	throttleMax = 2 * time.Second
)

// Config describes one upstream and how to bind to it. Zero values take the
// documented defaults; New copies the Config, so it is read once.
type Config struct {
	Name    string      // upstream name, used in logs and session ids
	Address string      // host:port
	TLS     *tls.Config // nil = plain TCP

	SystemID, Password, SystemType string

	// Bind is the type of the Binds sessions: smpp.BindTransceiver
	// (default when smpp.BindNone), smpp.BindTransmitter or
	// smpp.BindReceiver. An undeclared value makes every bind attempt
	// fail (visible in Sessions and the log).
	Bind smpp.BindType
	// Receivers, with Bind smpp.BindTransmitter, opens as many receiver
	// sessions on top of the Binds transmitters (the configuration's
	// "transmitter+receiver"); the receivers only receive. Ignored for
	// any other Bind.
	Receivers bool
	// Binds is the number of parallel sessions (default 1); with
	// Receivers as many receiver sessions are opened on top.
	Binds int
	// Window is the number of outstanding requests per session (default
	// 10).
	Window int
	// DeliverWindow bounds the OnDeliver calls running at once over all
	// the sessions of the pool (default 1000): receipt intake has its own
	// window, so a burst of receipts is not refused because it is larger
	// than the submit window.
	DeliverWindow int
	// Throughput caps submits per second over the whole upstream (0 =
	// unlimited): a token bucket whose burst is 10% of the rate, minimum 1.
	Throughput float64
	// ResponseTimeout bounds the wait for a response once the request was
	// written (default 10s).
	ResponseTimeout time.Duration
	// RouteWait is how long Submit waits for a bound session with a free
	// window slot and for a throughput token (default 2s).
	RouteWait time.Duration
	// EnquireLink: an enquire_link is sent after this long without
	// receiving anything; a session that received nothing for three times
	// this long is closed (default 30s).
	EnquireLink time.Duration
	// ConnectTimeout bounds the dial, the TLS handshake and the bind
	// handshake together (default 10s).
	ConnectTimeout time.Duration
	// UnbindWait is how long Close waits for unbind_resp (default 1s).
	UnbindWait time.Duration
	// MaxPDUSize bounds command_length of incoming PDUs (default
	// DefaultMaxPDUSize); a larger one closes the session.
	MaxPDUSize int
	// RebindMin and RebindMax bound the exponential back-off between bind
	// attempts of one slot (defaults 500ms and 30s); jitter is applied.
	// A failed bind and a session that ends less than StableAfter after
	// its bind both count as a failed attempt: an upstream that accepts
	// binds and drops them at once is redialled ever more slowly.
	RebindMin, RebindMax time.Duration
	// StableAfter is how long a session must stay bound for the back-off
	// to start again from RebindMin when it ends (default 1m).
	StableAfter time.Duration
	// Backoff, if set, replaces the default back-off: it returns the pause
	// before bind attempt number attempt (1 for the first retry).
	Backoff func(attempt int) time.Duration
	// Now and Sleep are the clock of the bind loops: how long a session
	// stayed bound, and the pause between attempts (Sleep waits d or until
	// ctx ends); Now is also the clock of the per-PDU warnings' rate limit
	// (WarnInterval) and of a throttled session's pause (how long Submit
	// leaves it out). Socket deadlines, route_wait and the throughput
	// limit stay on the real clock. Defaults: the real clock. Injectable
	// for tests.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration)
	// InstanceID is unique per process run and part of every session id, so
	// session ids (the journal's key together with sequence numbers) never
	// repeat across restarts. Empty: New draws a random one.
	InstanceID string
	// Logger receives session events (never message content). nil =
	// slog.Default().
	Logger *slog.Logger

	// OnDeliver handles a deliver_sm or data_sm from the upstream (receipts
	// and MO). It runs in its own goroutine, at most DeliverWindow at a
	// time over the pool, and returns the status of the deliver_sm_resp/data_sm_resp,
	// which is written after it returns. A request beyond the window is
	// answered ESME_RTHROTTLED at once (the upstream redelivers). ctx is
	// cancelled when the session closes; a response is then not sent. A
	// panic is recovered and answered ESME_RSYSERR. nil answers ESME_ROK.
	OnDeliver func(ctx context.Context, d Delivery) smpp.Status
	// OnSessionLost is called once for every bound session that closes,
	// for whatever reason (Close included), after each of its pending
	// requests was handed ErrSessionLost (those Submit calls may return
	// concurrently with it). The session id is never used again.
	OnSessionLost func(session string)
	// OnLateResponse is called, in the session's reader goroutine (keep it
	// short), for a response whose sequence number has no pending request:
	// typically one that came after ErrTimeout was returned.
	OnLateResponse func(session string, seq uint32, r Response)
}

// DefaultMaxPDUSize is the default bound of an upstream's PDUs: 128 KiB,
// room for the largest a SMSC may legally send (a deliver_sm whose
// message_payload holds 65,535 octets is over 64 KiB with its fields).
const DefaultMaxPDUSize = 128 << 10

// Delivery is a deliver_sm or data_sm received from the upstream.
type Delivery struct {
	Upstream string
	Session  string
	Frame    []byte // the whole PDU, header included
}

// Response is the upstream's answer to a request sent with Submit. A
// generic_nack with the request's sequence number is a response too (its
// status, no message id). When Submit fails after a sequence number was
// assigned, the Response it returns still carries Session and Sequence.
type Response struct {
	Status    smpp.Status
	MessageID string // from submit_sm_resp, data_sm_resp or query_sm_resp when Status is 0
	Frame     []byte // the whole response PDU
	Session   string
	Sequence  uint32
}

// SessionInfo describes one session for the admin API.
type SessionInfo struct {
	ID         string
	State      State
	Bind       smpp.BindType // what the session binds as; Name() is its admin spelling
	InFlight   int
	Window     int
	BoundSince time.Time // zero unless bound
	LastError  string    // why the last bind attempt failed or the session closed
	Submits    uint64    // requests written on this session
}

func (c Config) withDefaults() Config {
	if c.Bind == smpp.BindNone {
		c.Bind = smpp.BindTransceiver
	}
	if c.Binds <= 0 {
		c.Binds = DefaultBinds
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.DeliverWindow <= 0 {
		c.DeliverWindow = DefaultDeliverWindow
	}
	if c.ResponseTimeout <= 0 {
		c.ResponseTimeout = DefaultResponseTimeout
	}
	if c.RouteWait <= 0 {
		c.RouteWait = DefaultRouteWait
	}
	if c.EnquireLink <= 0 {
		c.EnquireLink = DefaultEnquireLink
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.UnbindWait <= 0 {
		c.UnbindWait = DefaultUnbindWait
	}
	if c.MaxPDUSize <= 0 {
		c.MaxPDUSize = DefaultMaxPDUSize
	}
	if c.RebindMin <= 0 {
		c.RebindMin = DefaultRebindMin
	}
	if c.RebindMax <= 0 {
		c.RebindMax = DefaultRebindMax
	}
	if c.RebindMax < c.RebindMin {
		c.RebindMax = c.RebindMin
	}
	if c.StableAfter <= 0 {
		c.StableAfter = DefaultStableAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = clock.Sleep
	}
	if c.Backoff == nil {
		lo, hi := c.RebindMin, c.RebindMax
		c.Backoff = func(attempt int) time.Duration { return backoff(lo, hi, attempt) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// backoff is capped exponential back-off with jitter: lo·2^(attempt-1),
// capped at hi, of which a random half is kept.
func backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// burst is the token bucket burst for a rate: 10% of it, at least 1.
func burst(perSecond float64) int {
	return max(1, int(perSecond/10))
}

// splitReceivers reports whether the pool opens a receiver session per
// transmitter (Receivers with Bind smpp.BindTransmitter).
func (c Config) splitReceivers() bool {
	return c.Receivers && c.Bind == smpp.BindTransmitter
}
