// Package sdnotify tells systemd the service's state, as sd_notify(3)
// does: one datagram of newline-separated VAR=VALUE assignments to the
// unix datagram socket systemd names in $NOTIFY_SOCKET (a path, or a
// name in the abstract namespace when it starts with "@"). Without that
// socket, as outside systemd or under a unit that is not Type=notify,
// every call does nothing.
//
// The command reads the environment once and builds the Notifier:
//
//	n := sdnotify.New(os.Getenv("NOTIFY_SOCKET"))
//	n.Ready() // the listener and the store are up
//
// Notifier methods are safe for concurrent use.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The states of sd_notify(3) this package sends.
const (
	StateReady     = "READY=1"     // start-up finished; also the end of a reload
	StateReloading = "RELOADING=1" // a reload began; Ready ends it
	StateStopping  = "STOPPING=1"  // shutdown began
	StateWatchdog  = "WATCHDOG=1"  // keep-alive when the unit sets WatchdogSec=
)

// ErrUnsupportedAddress is returned for a $NOTIFY_SOCKET that is neither
// a path nor an abstract name (systemd's vsock: addresses, for one).
var ErrUnsupportedAddress = errors.New("sdnotify: unsupported socket address")

// Notifier sends states to the service manager. The zero Notifier, a nil
// *Notifier and New("") send nothing and return nil.
type Notifier struct {
	socket string
}

// New returns a Notifier for socket, the value of $NOTIFY_SOCKET: an
// absolute path, or "@name" for the abstract namespace. "" disables it.
func New(socket string) *Notifier {
	return &Notifier{socket: socket}
}

// Enabled reports whether n sends anything.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// Notify sends states (each "VAR=VALUE") in one datagram. It returns an
// error when the socket cannot be reached; the service should log it and
// go on, as systemd then does not listen.
func (n *Notifier) Notify(states ...string) error {
	if !n.Enabled() || len(states) == 0 {
		return nil
	}
	if !strings.HasPrefix(n.socket, "/") && !strings.HasPrefix(n.socket, "@") {
		return fmt.Errorf("%w: %q", ErrUnsupportedAddress, n.socket)
	}
	// Go's unix sockets map a leading "@" to the abstract namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n") + "\n")); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// Ready sends READY=1: the service is up (after start-up, and again at the
// end of a reload).
func (n *Notifier) Ready() error { return n.Notify(StateReady) }

// Reloading sends RELOADING=1 with MONOTONIC_USEC (the monotonic clock,
// which systemd 253 and later match against the reload they asked for,
// where the platform exposes it). Ready must follow when the reload ends.
func (n *Notifier) Reloading() error {
	if usec, ok := monotonicUsec(); ok {
		return n.Notify(StateReloading, "MONOTONIC_USEC="+strconv.FormatInt(usec, 10))
	}
	return n.Notify(StateReloading)
}

// Stopping sends STOPPING=1: the shutdown began.
func (n *Notifier) Stopping() error { return n.Notify(StateStopping) }

// Watchdog sends WATCHDOG=1, the keep-alive of a unit with WatchdogSec=.
func (n *Notifier) Watchdog() error { return n.Notify(StateWatchdog) }
