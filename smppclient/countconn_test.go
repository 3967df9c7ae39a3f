package smppclient

import (
	"net"
	"sync/atomic"
)

// countingConn counts the Write calls made on a connection (each one is a
// write syscall on a TCP socket) and can be made to fail them.
type countingConn struct {
	net.Conn
	writes atomic.Int64
	// block, when not nil, is received from before each Write (a test
	// holds the writer there while it queues frames).
	block chan struct{}
	// fail, when set, makes Write write that many bytes and fail.
	fail   atomic.Pointer[failWrite]
	frames atomic.Int64 // frames in the Write calls (by command_length)
}

type failWrite struct {
	n   int
	err error
}

func (c *countingConn) Write(b []byte) (int, error) {
	if c.block != nil {
		<-c.block
	}
	c.writes.Add(1)
	c.frames.Add(int64(countFrames(b)))
	if f := c.fail.Load(); f != nil {
		n, err := c.Conn.Write(b[:min(f.n, len(b))])
		if err == nil {
			err = f.err
		}
		return n, err
	}
	return c.Conn.Write(b)
}

// countFrames counts the whole PDUs at the start of b.
func countFrames(b []byte) int {
	n := 0
	for len(b) >= 4 {
		l := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
		if l < 16 || l > len(b) {
			break
		}
		b = b[l:]
		n++
	}
	return n
}
