package smppserver

import "fmt"

// CloseReason is the one reason a session ended (nats-server ClosedState
// style); it is logged and used as a metric label, always by name:
// MarshalText writes String, so text and JSON log handlers print
// "client_closed", never a number.
type CloseReason int

// Close reasons.
const (
	ReasonNone CloseReason = iota
	ReasonClientClosed
	ReasonUnbind
	ReasonBindTimeout
	ReasonBindFailed
	ReasonIdleTimeout
	ReasonProtocolError
	ReasonReadError
	ReasonWriteError
	ReasonServerShutdown
	ReasonKicked
	reasonCount
)

var reasonNames = [...]string{
	ReasonNone:           "none",
	ReasonClientClosed:   "client_closed",
	ReasonUnbind:         "unbind",
	ReasonBindTimeout:    "bind_timeout",
	ReasonBindFailed:     "bind_failed",
	ReasonIdleTimeout:    "idle_timeout",
	ReasonProtocolError:  "protocol_error",
	ReasonReadError:      "read_error",
	ReasonWriteError:     "write_error",
	ReasonServerShutdown: "server_shutdown",
	ReasonKicked:         "kicked",
}

// String is the reason's name ("client_closed", …).
func (r CloseReason) String() string {
	if r >= 0 && r < reasonCount {
		return reasonNames[r]
	}
	return "unknown"
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
	return fmt.Errorf("smppserver: unknown close reason %q", text)
}
