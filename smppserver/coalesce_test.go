package smppserver

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// gatedListener hands out connections whose Writes are counted (with the
// whole PDUs in each) and can be held at a gate.
type gatedListener struct {
	net.Listener
	gate   testkit.Gate // each Write passes it
	mu     sync.Mutex
	writes int
	frames []int // whole PDUs in each Write
}

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, l: l}, nil
}

// counts returns the number of Writes so far and the PDUs in the last one.
func (l *gatedListener) counts() (writes, lastFrames int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.frames) > 0 {
		lastFrames = l.frames[len(l.frames)-1]
	}
	return l.writes, lastFrames
}

type gatedConn struct {
	net.Conn
	l *gatedListener
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.l.gate.Pass()
	n := 0
	for p := b; len(p) >= smpp.HeaderLen && int(binary.BigEndian.Uint32(p)) <= len(p); p = p[binary.BigEndian.Uint32(p):] {
		n++
	}
	c.l.mu.Lock()
	c.l.writes++
	c.l.frames = append(c.l.frames, n)
	c.l.mu.Unlock()
	return c.Conn.Write(b)
}

// Frames queued while the writer is blocked in a write go out together in
// the next one, not one write each.
func TestFramesQueuedWhileTheWriterIsBlockedGoOutInOneWrite(t *testing.T) {
	srv := newTestServer(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := &gatedListener{Listener: ln}
	addr, _ := serveOn(t, srv, gl)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	before, _ := gl.counts()

	entered, release := gl.gate.Hold()
	first := c.send(smpp.CmdEnquireLink, nil)
	select {
	case <-entered:
	case <-time.After(ioTimeout):
		t.Fatal("the server never wrote the first enquire_link_resp")
	}
	const n = 10
	var seqs []uint32
	for range n {
		seqs = append(seqs, c.send(smpp.CmdEnquireLink, nil))
	}
	sess := srv.Sessions()[0]
	testkit.Eventually(t, ioTimeout, func() bool { return len(sess.out) == n }, "the answers queued behind the blocked write")
	release()
	c.expect("first enquire_link_resp", smpp.CmdEnquireLink|smpp.RespBit, first, smpp.StatusOK)
	for _, seq := range seqs {
		c.expect("enquire_link_resp", smpp.CmdEnquireLink|smpp.RespBit, seq, smpp.StatusOK)
	}
	writes, last := gl.counts()
	if writes-before != 2 || last != n {
		t.Errorf("%d writes (the last of %d PDUs) for 1 blocked answer and %d queued, want 2 (the last of %d)", writes-before, last, n, n)
	}
}
