package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a unix datagram socket where systemd would, at name (a path
// or "@abstract"), closed at the end of the test.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// socketPath is a fresh socket path short enough for sun_path (108 bytes).
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "notify")
}

// receive reads one datagram, or fails the test after 5s.
func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _, err := c.ReadFromUnix(buf)
	if err != nil {
		t.Fatalf("no datagram at the socket: %v", err)
	}
	return string(buf[:n])
}

// Every state reaches the socket as one datagram holding its assignment.
func TestEachStateIsOneDatagramOnTheSocket(t *testing.T) {
	path := socketPath(t)
	sock := listen(t, path)
	n := New(path)
	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"Ready", n.Ready, "READY=1\n"},
		{"Stopping", n.Stopping, "STOPPING=1\n"},
		{"Watchdog", n.Watchdog, "WATCHDOG=1\n"},
	} {
		if err := tc.send(); err != nil {
			t.Fatalf("%s() = %v, want nil", tc.name, err)
		}
		if got := receive(t, sock); got != tc.want {
			t.Errorf("%s() sent %q, want %q", tc.name, got, tc.want)
		}
	}
	if err := n.Notify("STATUS=draining", "EXTEND_TIMEOUT_USEC=5000000"); err != nil {
		t.Fatal(err)
	}
	if got, want := receive(t, sock), "STATUS=draining\nEXTEND_TIMEOUT_USEC=5000000\n"; got != want {
		t.Errorf("Notify(two states) sent %q, want %q", got, want)
	}
}

// RELOADING=1 carries the monotonic clock on Linux (systemd matches it to
// the reload it asked for); it never goes backwards.
func TestReloadingCarriesTheMonotonicClock(t *testing.T) {
	path := socketPath(t)
	sock := listen(t, path)
	n := New(path)
	var last int64
	for i := range 2 {
		if err := n.Reloading(); err != nil {
			t.Fatal(err)
		}
		got := receive(t, sock)
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		if lines[0] != StateReloading {
			t.Fatalf("Reloading() sent %q, want RELOADING=1 first", got)
		}
		if runtime.GOOS != "linux" {
			continue
		}
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
			t.Fatalf("Reloading() sent %q, want RELOADING=1 and MONOTONIC_USEC=", got)
		}
		usec, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
		if err != nil || usec <= 0 || usec < last {
			t.Errorf("call %d: MONOTONIC_USEC %q (previous %d): want a positive, non-decreasing integer", i, lines[1], last)
		}
		last = usec
	}
}

// A $NOTIFY_SOCKET starting with "@" is a name in the abstract namespace.
func TestAbstractSocketNameIsReached(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the abstract namespace is Linux's")
	}
	name := fmt.Sprintf("@smppproxy-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	sock := listen(t, name)
	if err := New(name).Ready(); err != nil {
		t.Fatalf("Ready() to %s = %v", name, err)
	}
	if got := receive(t, sock); got != "READY=1\n" {
		t.Errorf("abstract socket got %q, want READY=1", got)
	}
}

// Without $NOTIFY_SOCKET nothing is sent and nothing fails: the proxy runs
// the same outside systemd.
func TestUnsetSocketIsANoOp(t *testing.T) {
	var nilNotifier *Notifier
	for name, n := range map[string]*Notifier{"New(\"\")": New(""), "zero": {}, "nil": nilNotifier} {
		if n.Enabled() {
			t.Errorf("%s: Enabled() = true, want false", name)
		}
		for _, send := range []func() error{n.Ready, n.Reloading, n.Stopping, n.Watchdog} {
			if err := send(); err != nil {
				t.Errorf("%s: send = %v, want nil", name, err)
			}
		}
	}
}

// A socket nobody listens on, or an address of a kind this client does not
// speak, is reported, so the caller can log it.
func TestUnreachableOrUnsupportedSocketIsAnError(t *testing.T) {
	if err := New(socketPath(t)).Ready(); err == nil {
		t.Error("Ready() to a path nobody listens on = nil, want an error")
	}
	if err := New("vsock:2:1234").Ready(); !errors.Is(err, ErrUnsupportedAddress) {
		t.Errorf("Ready() to vsock:2:1234 = %v, want ErrUnsupportedAddress", err)
	}
}
