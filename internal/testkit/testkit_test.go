package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Eventually returns as soon as the condition holds, having looked again
// after it first failed.
func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	Eventually(t, time.Minute, func() bool { return looks.Add(1) >= 3 }, "three looks")
	if n := looks.Load(); n != 3 {
		t.Errorf("cond called %d times, want 3 (stop at the first true)", n)
	}
}

// A condition that never holds is reported as a failure, not waited for
// forever.
func TestPollGivesUpAtTheDeadline(t *testing.T) {
	looks := 0
	if Poll(5*time.Millisecond, func() bool { looks++; return false }) {
		t.Fatal("Poll() = true for a condition that never holds")
	}
	if looks < 2 {
		t.Errorf("cond called %d times, want it looked at again before giving up", looks)
	}
}

// A goroutine started after the count and still running is a leak; once
// it ends, the count settles.
func TestGoroutinesSeesALeakUntilItEnds(t *testing.T) {
	g := CountGoroutines()
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go parkedInTestkit(started, stop, done)
	<-started
	if n, ok := g.Settle(0, 0); ok {
		t.Fatalf("Settle() = %d, true with a goroutine still running; want false", n)
	}
	close(stop)
	<-done
	if n, ok := g.Settle(time.Minute, 0); !ok {
		t.Fatalf("Settle() = %d, false after the goroutine ended (count before %d)", n, g.Count())
	}
}

// LeftRunning names a goroutine still running in a function it is asked
// about, and nothing once that goroutine has ended.
func TestLeftRunningNamesTheGoroutinesOfAFunction(t *testing.T) {
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go parkedInTestkit(started, stop, done)
	<-started
	if left := LeftRunning(0, "testkit.parkedInTestkit"); !strings.Contains(left, "parkedInTestkit") {
		t.Fatalf("LeftRunning() = %q with parkedInTestkit running, want its stack", left)
	}
	close(stop)
	<-done
	if left := LeftRunning(time.Minute, "testkit.parkedInTestkit"); left != "" {
		t.Fatalf("LeftRunning() = %q after the goroutine ended, want \"\"", left)
	}
}

func parkedInTestkit(started chan<- struct{}, stop <-chan struct{}, done chan<- struct{}) {
	close(started)
	<-stop
	close(done)
}

// LogLines counts lines by message and reports the held-back count of the
// last line of each.
func TestLogLinesCountsByMessageWithTheLastSuppressedCount(t *testing.T) {
	lines := NewLogLines()
	log := slog.New(lines)
	log.Warn("noisy")
	log.Warn("noisy", "suppressed", 29)
	log.Info("quiet")
	if n, sup := lines.Count("noisy"); n != 2 || sup != 29 {
		t.Errorf(`Count("noisy") = %d, %d; want 2, 29`, n, sup)
	}
	if n, sup := lines.Count("quiet"); n != 1 || sup != 0 {
		t.Errorf(`Count("quiet") = %d, %d; want 1, 0`, n, sup)
	}
}

// A server certificate of a CA is trusted by a client of the CA's pool
// and refused by one that does not know the CA; Serve answers every
// connection with its handler.
func TestServeWithACertificateOfTheTestCA(t *testing.T) {
	ca := NewCA(t)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Server(t)}})
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, l, func(c net.Conn) { _, _ = c.Write([]byte("hi")) })
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: ca.Pool})
	if err != nil {
		t.Fatalf("dial trusting the CA: %v", err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hi" {
		t.Errorf("read = %q, %v; want \"hi\" from the handler", b, err)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{}); !errors.As(err, &unknown) {
		t.Errorf("dial without the CA = %v, want x509.UnknownAuthorityError", err)
	}
}

// Get sends the bearer token only when there is one, and returns the
// status and the whole body.
func TestGetSendsTheTokenAndReadsTheBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "auth="+r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	for token, want := range map[string]string{"": "auth=", "tok": "auth=Bearer tok"} {
		resp, body := Get(t, srv.URL, token)
		if resp.StatusCode != http.StatusTeapot || body != want {
			t.Errorf("Get(token %q) = %d %q, want 418 %q", token, resp.StatusCode, body, want)
		}
	}
}

// An open Gate lets Pass through; a held one keeps it, tells entered, and
// lets it through on release.
func TestGateHoldsPassUntilRelease(t *testing.T) {
	var g Gate
	g.Pass() // open: returns at once
	entered, release := g.Hold()
	passed := make(chan struct{})
	go func() {
		g.Pass()
		close(passed)
	}()
	<-entered
	select {
	case <-passed:
		t.Fatal("Pass returned while the gate was held")
	default:
	}
	release()
	<-passed
	g.Pass() // open again after the release
}
