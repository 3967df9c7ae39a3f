package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Relay forwards 127.0.0.1 connections to the database, so that a test can
// make it go away: Cut closes every connection and refuses new ones, Stall
// accepts connections and never answers, Heal lets them through again.
type Relay struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	down    bool // refuse connections
	stalled bool // accept connections and never answer
	conns   []net.Conn
}

// ThroughRelay returns a Relay in front of dsn's database and dsn pointed
// at it; it skips t when dsn is not a URL with a host.
func ThroughRelay(t testing.TB, dsn string) (*Relay, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("%s is not a URL DSN with a host (%v): cannot put a relay in front", EnvDSN, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, target: u.Host}
	t.Cleanup(func() { _ = ln.Close(); r.Cut() })
	go r.serve()
	u.Host = ln.Addr().String()
	return r, u.String()
}

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.down {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		if r.stalled {
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			continue
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close(); _ = c.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = up.Close(); _ = c.Close() }()
	}
}

// Cut closes every connection and refuses new ones: the database is gone.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

// Heal lets connections through again.
func (r *Relay) Heal() {
	r.mu.Lock()
	r.down, r.stalled = false, false
	r.mu.Unlock()
}

// Stall closes every connection and then accepts new ones without ever
// answering: a database that hangs.
func (r *Relay) Stall() {
	r.Cut()
	r.mu.Lock()
	r.down, r.stalled = false, true
	r.mu.Unlock()
}
