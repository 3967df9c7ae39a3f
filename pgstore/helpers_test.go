package pgstore

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/pgtest"
)

// The tests run against a real PostgreSQL (internal/pgtest): without
// SMPPPROXY_TEST_POSTGRES they skip, unless SMPPPROXY_REQUIRE_POSTGRES=1
// (CI), when they fail.
var bg = context.Background()

func testDSN(t testing.TB) string {
	t.Helper()
	return pgtest.DSN(t)
}

// newSchema returns the name of a schema of the test's own, dropped (with
// everything in it) when the test ends.
func newSchema(t testing.TB, dsn string) string {
	t.Helper()
	return pgtest.Schema(t, dsn, "pgstore_test_")
}

// openTest opens a store on a fresh schema (or the given one).
func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.DSN == "" {
		opts.DSN = testDSN(t)
	}
	if opts.Schema == "" {
		opts.Schema = newSchema(t, opts.DSN)
		opts.Migrate = true
	}
	if opts.InstanceID == "" {
		opts.InstanceID = "test-1"
	}
	if opts.Lease == 0 {
		opts.Lease = time.Hour // no heartbeat during a test unless asked
	}
	s, err := Open(bg, opts)
	if err != nil {
		t.Fatalf("Open(%s, %s) = %v", opts.Schema, opts.InstanceID, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exec runs sql on a connection of its own.
func exec(t testing.TB, dsn, sql string, args ...any) pgconnTag {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return pgconnTag{tag.RowsAffected()}
}

type pgconnTag struct{ rows int64 }

// tcpProxy forwards 127.0.0.1 connections to PostgreSQL; cut closes every
// connection and refuses new ones (the database is gone), heal lets them
// through again.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	down    bool // refuse connections
	stalled bool // accept connections and never answer
	conns   []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		if p.stalled {
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close(); c.Close() }()
		go func() { io.Copy(c, up); up.Close(); c.Close() }()
	}
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) heal() {
	p.mu.Lock()
	p.down, p.stalled = false, false
	p.mu.Unlock()
}

// stall closes every connection and then accepts new ones without ever
// answering.
func (p *tcpProxy) stall() {
	p.cut()
	p.mu.Lock()
	p.down, p.stalled = false, true
	p.mu.Unlock()
}
