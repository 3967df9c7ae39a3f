package smppclient

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// countingConn counts the Write calls made on a connection (each one is a
// write syscall on a TCP socket) and the frames in them; a test can hold
// the writes at a gate and make one of them fail.
type countingConn struct {
	net.Conn
	writes atomic.Int64
	frames atomic.Int64 // whole PDUs handed to Write

	gate testkit.Gate // each Write passes it

	mu      sync.Mutex
	failAt  int64 // the Write with this number (1-based) fails…
	failN   int   // …having written this many bytes
	failErr error
	lastLen int // frames in the last Write
}

// failWrite makes the k-th Write from now write n bytes and return err.
func (c *countingConn) failWrite(k int64, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failAt, c.failN, c.failErr = c.writes.Load()+k, n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.gate.Pass()
	k := c.writes.Add(1)
	frames := countFrames(b)
	c.frames.Add(int64(frames))
	c.mu.Lock()
	c.lastLen = frames
	fail := k == c.failAt
	n, err := c.failN, c.failErr
	c.mu.Unlock()
	if fail {
		if n > 0 {
			_, _ = c.Conn.Write(b[:min(n, len(b))])
		}
		return min(n, len(b)), err
	}
	return c.Conn.Write(b)
}

// framesInLastWrite is the number of whole PDUs the last Write carried.
func (c *countingConn) framesInLastWrite() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastLen
}

// countFrames counts the whole PDUs at the start of b.
func countFrames(b []byte) int {
	n := 0
	for len(b) >= 16 {
		l := int(binary.BigEndian.Uint32(b))
		if l < 16 || l > len(b) {
			break
		}
		b = b[l:]
		n++
	}
	return n
}
