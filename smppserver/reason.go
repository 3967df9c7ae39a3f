package smppserver

// CloseReason is the one reason a session ended (nats-server ClosedState
// style); it is logged and used as a metric label.
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

func (r CloseReason) String() string {
	if int(r) >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}
