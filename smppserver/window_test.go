package smppserver

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// gatedHandler answers each submit_sm with status 0 once the gate of its
// sequence number is closed; it reports on started when it begins.
// abort releases every handler (without an answer) when a test fails while
// handlers wait on a context that never ends.
type gatedHandler struct {
	gates     map[uint32]chan struct{} // fixed before the first request
	started   chan uint32
	stop      chan struct{}
	abortOnce sync.Once
}

func newGatedHandler(seqs ...uint32) *gatedHandler {
	g := &gatedHandler{gates: make(map[uint32]chan struct{}), started: make(chan uint32, 16), stop: make(chan struct{})}
	for _, s := range seqs {
		g.gates[s] = make(chan struct{})
	}
	return g
}

func (g *gatedHandler) ServeSMPP(ctx context.Context, w ResponseWriter, r *Request) {
	g.started <- r.Header.Sequence
	if gate, ok := g.gates[r.Header.Sequence]; ok {
		select {
		case <-gate:
		case <-ctx.Done():
			return
		case <-g.stop:
			return
		}
	}
	okHandler(ctx, w, r)
}

func (g *gatedHandler) abort() { g.abortOnce.Do(func() { close(g.stop) }) }

func (g *gatedHandler) waitStarted(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.started:
		case <-timeAfter():
			t.Fatalf("handler not started")
		}
	}
}

// With a window of 2, a third outstanding submit is throttled at once;
// the two in flight are handled concurrently and answered as they finish.
func TestWindow(t *testing.T) {
	t.Parallel()
	g := newGatedHandler(2, 3) // the bind is sequence 1
	srv, addr := startServer(t, g)
	c := dialESME(t, addr)
	c.mustBind(smpp.CmdBindTransceiver, "narrow") // Principal.Window = 2

	seq1 := c.send(smpp.CmdSubmitSM, submitBody("one"))
	seq2 := c.send(smpp.CmdSubmitSM, submitBody("two"))
	g.waitStarted(t, 2) // both run at the same time
	s := sessionOf(t, srv, c)
	if got := s.InFlight(); got != 2 {
		t.Errorf("InFlight() = %d, want 2", got)
	}

	seq3 := c.send(smpp.CmdSubmitSM, submitBody("three"))
	c.expect("third submit beyond the window", smpp.CmdSubmitSM|smpp.RespBit, seq3, smpp.StatusThrottled)
	c.expectOpen("window full") // session management is not windowed

	close(g.gates[seq2])
	c.expect("second submit, released first", smpp.CmdSubmitSM|smpp.RespBit, seq2, smpp.StatusOK)
	close(g.gates[seq1])
	c.expect("first submit, released last", smpp.CmdSubmitSM|smpp.RespBit, seq1, smpp.StatusOK)

	waitFor(t, "InFlight() = 0", func() bool { return s.InFlight() == 0 })
	c.submit("submit once the window is free", smpp.StatusOK)
	if got := s.Requests(); got != 3 {
		t.Errorf("Requests() = %d, want 3 (the throttled one is not handed to the handler)", got)
	}
}

// Server.Window applies when the Principal sets none.
func TestServerWindowDefault(t *testing.T) {
	t.Parallel()
	g := newGatedHandler(2) // the bind is sequence 1
	_, addr := startServer(t, g, func(s *Server) { s.Window = 1 })
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	seq := c.send(smpp.CmdSubmitSM, submitBody("one"))
	g.waitStarted(t, 1)
	c.submit("second submit with Server.Window = 1", smpp.StatusThrottled)
	close(g.gates[seq])
	c.expect("first submit", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusOK)
}

// A window slot is free once the response is written, not when the
// handler returns: a client that keeps exactly its window outstanding
// sends its next submit as soon as it has the answer, and must not be
// throttled for a handler still finishing after it answered.
func TestWindowSlotIsFreeOnceTheResponseIsWritten(t *testing.T) {
	t.Parallel()
	finish := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, w ResponseWriter, r *Request) {
		okHandler(ctx, w, r)
		select { // still "running" after answering
		case <-finish:
		case <-ctx.Done():
		}
	})
	_, addr := startServer(t, h, func(s *Server) { s.Window = 1 })
	defer close(finish)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	c.submit("first submit, window 1", smpp.StatusOK)
	c.submit("next submit right after the answer, the first handler not yet returned", smpp.StatusOK)
}

// A client that sends requests and never reads its answers gets no more
// handlers than its window: once the answers fill the write queue, the
// session stops reading instead of admitting a handler per request, each
// to block on the full queue (from review: with window 2, hundreds of
// handler goroutines, each holding its answer, until the write deadline).
func TestAClientThatNeverReadsGetsNoMoreHandlersThanItsWindow(t *testing.T) {
	t.Parallel()
	var live, peak atomic.Int32
	big := make([]byte, 60000) // answers that fill the socket's buffers soon
	h := HandlerFunc(func(_ context.Context, w ResponseWriter, r *Request) {
		n := live.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		_ = w.WriteFrame(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusOK, r.Header.Sequence, big))
		live.Add(-1)
	})
	waits := make(chan struct{}, 1)
	_, addr := startServer(t, h, func(s *Server) {
		s.Window = 2
		s.MaxPDUSize = 1 << 20
		s.readerWaits = func() {
			select {
			case waits <- struct{}{}:
			default:
			}
		}
	})
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	go func() { // never read
		frame := smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, 0, submitBody("hi"))
		for seq := uint32(10); ; seq++ {
			binary.BigEndian.PutUint32(frame[12:], seq)
			if _, err := c.conn.Write(frame); err != nil {
				return
			}
		}
	}()
	select {
	case <-waits:
	case <-timeAfter():
		t.Fatalf("the session never stopped reading a client that reads nothing (handlers running: %d)", live.Load())
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("handlers running at once for a client that never reads = %d, want at most its window 2", p)
	}
	_ = c.conn.Close()
}
