package smppclient

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// newCountingPool starts a pool of one session on addr whose connection
// is a countingConn (the first one dialled is returned once bound).
func newCountingPool(t *testing.T, addr string, window int) (*Pool, *countingConn) {
	t.Helper()
	var mu sync.Mutex
	var first *countingConn
	p := startPool(t, testConfig(t, addr, func(c *Config) { c.Window = window }), func(c net.Conn) net.Conn {
		cc := &countingConn{Conn: c}
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = cc
		}
		return cc
	})
	waitUp(t, p, 1)
	mu.Lock()
	defer mu.Unlock()
	return p, first
}

// queued is the number of frames waiting in the writer's queue of the
// pool's first session.
func queued(p *Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slots[0].writeq)
}

// goSubmits starts n submits and returns their errors' channel.
func goSubmits(p *Pool, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := submit(p, "")
			errs <- err
		}()
	}
	return errs
}

// blockWriterAndQueue holds the session's writer inside a Write carrying
// one submit (whose error channel is returned), then queues n more
// submits behind it and waits until they are all in the writer's queue.
// release lets the writer go on.
func blockWriterAndQueue(t *testing.T, p *Pool, c *countingConn, n int) (first, rest <-chan error, release func()) {
	t.Helper()
	entered, release := c.gate.Hold()
	first = goSubmits(p, 1)
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer never wrote the first submit")
	}
	rest = goSubmits(p, n)
	eventually(t, "the submits queued behind the blocked write", func() bool { return queued(p) == n })
	return first, rest, release
}

func TestSubmitsQueuedWhileTheWriterIsBlockedGoOutInOneWrite(t *testing.T) {
	f := startFake(t)
	const n = 10
	p, c := newCountingPool(t, f.addr, 2*n)
	before := c.writes.Load()
	first, rest, release := blockWriterAndQueue(t, p, c, n)
	release()
	for range n {
		if err := <-rest; err != nil {
			t.Errorf("Submit = %v", err)
		}
	}
	if err := <-first; err != nil {
		t.Errorf("first Submit = %v", err)
	}
	if got := c.writes.Load() - before; got != 2 {
		t.Errorf("%d Writes for 1 blocked submit and %d queued behind it, want 2", got, n)
	}
	if got := c.framesInLastWrite(); got != n {
		t.Errorf("the last Write carried %d frames, want the %d queued", got, n)
	}
}

// A Write that fails leaves ambiguous the requests whose frame began
// within the bytes that went out (a frame may have reached the SMSC), and
// not sent the ones behind them, or all of them when no byte went out.
func TestFailedWriteReportsEveryRequestInIt(t *testing.T) {
	for _, tt := range []struct {
		name      string
		written   int
		ambiguous int // of the n queued, the first ones
	}{
		{"part of the first frame written", 5, 1},
		{"no byte written", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t)
			const n = 6
			p, c := newCountingPool(t, f.addr, 2*n)
			first, rest, release := blockWriterAndQueue(t, p, c, n)
			c.failWrite(2, tt.written, errTest) // the blocked Write passes, the next fails
			release()
			if err := <-first; err != nil && !Ambiguous(err) {
				t.Errorf("the submit written before the failure: Submit = %v, want a response or ambiguous", err)
			}
			ambiguous, notSent := 0, 0
			for range n {
				switch err := <-rest; {
				case Ambiguous(err) && !errors.Is(err, ErrNotSent):
					ambiguous++
				case errors.Is(err, ErrNotSent):
					notSent++
				default:
					t.Errorf("Submit in a failed Write = %v, want ambiguous or not sent", err)
				}
			}
			if ambiguous != tt.ambiguous || notSent != n-tt.ambiguous {
				t.Errorf("a Write that wrote %d bytes of %d frames: %d ambiguous, %d not sent; want %d and %d", tt.written, n, ambiguous, notSent, tt.ambiguous, n-tt.ambiguous)
			}
			if got := c.framesInLastWrite(); got != n {
				t.Errorf("the failed Write carried %d frames, want the %d queued", got, n)
			}
		})
	}
}
