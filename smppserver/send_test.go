package smppserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// pendingLen is the number of requests awaiting a response on s.
func pendingLen(s *Session) int {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return len(s.pending)
}

// Send returns once the request is queued, before the ESME answers; the
// response then comes on resp, once, and cancel may be called any number
// of times.
func TestSessionSendReturnsBeforeResponse(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)
	rx := dialBound(t, addr, smpp.CmdBindReceiver)
	s := sessionOf(t, srv, rx)

	// The ESME reads nothing yet: a Send that waited for the response
	// would not return.
	sent := make(chan error, 1)
	var resp <-chan []byte
	var cancel func()
	go func() {
		var err error
		resp, cancel, err = s.Send(context.Background(), smpp.CmdDeliverSM, deliverBody("receipt"))
		sent <- err
	}()
	awaitErr(t, sent, nil, "Send()", "Send did not return before the response")
	if n := pendingLen(s); n != 1 {
		t.Errorf("pending after Send = %d, want 1", n)
	}
	select {
	case f := <-resp:
		t.Fatalf("response %x before the ESME answered", f)
	default:
	}

	h, frame := rx.read()
	if h.ID != smpp.CmdDeliverSM || !bytes.Equal(frame[smpp.HeaderLen:], deliverBody("receipt")) {
		t.Fatalf("ESME got %s body %q, want the deliver_sm", fmtHeader(h), frame[smpp.HeaderLen:])
	}
	want := smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte{0})
	rx.write(want)
	select {
	case f := <-resp:
		if !bytes.Equal(f, want) {
			t.Errorf("response = %x, want %x", f, want)
		}
	case <-timeAfter():
		t.Fatalf("no response on resp")
	}
	// Delivered once: a second, identical response is not matched.
	rx.write(want)
	rx.expectOpen("after a duplicate deliver_sm_resp")
	select {
	case f := <-resp:
		t.Errorf("second response %x on resp", f)
	default:
	}
	if n := pendingLen(s); n != 0 {
		t.Errorf("pending after the response = %d, want 0", n)
	}
	cancel()
	cancel()
}

// cancel forgets a request still awaiting its response: a response coming
// later is dropped.
func TestSessionSendCancel(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)
	rx := dialBound(t, addr, smpp.CmdBindReceiver)
	s := sessionOf(t, srv, rx)

	resp, cancel, err := s.Send(context.Background(), smpp.CmdDeliverSM, deliverBody("forgotten"))
	if err != nil {
		t.Fatalf("Send() = %v", err)
	}
	h, _ := rx.read()
	cancel()
	cancel()
	if n := pendingLen(s); n != 0 {
		t.Errorf("pending after cancel = %d, want 0", n)
	}
	rx.write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte{0}))
	rx.expectOpen("after the response to a cancelled request")
	select {
	case f := <-resp:
		t.Errorf("response %x delivered after cancel", f)
	default:
	}
}

// Requests sent with Send back to back reach the ESME in call order, also
// when there are more of them than the write queue holds; each response
// comes on its own request's channel.
func TestSessionSendOrder(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)
	rx := dialBound(t, addr, smpp.CmdBindReceiver)
	s := sessionOf(t, srv, rx)

	n := 3 * cap(s.out)
	type sent struct {
		resp   <-chan []byte
		cancel func()
	}
	sends := make(chan sent, n)
	errc := make(chan error, 1)
	go func() {
		defer close(sends)
		for i := range n {
			resp, cancel, err := s.Send(context.Background(), smpp.CmdDeliverSM, deliverBody(fmt.Sprint(i)))
			if err != nil {
				errc <- fmt.Errorf("Send #%d: %w", i, err)
				return
			}
			sends <- sent{resp, cancel}
		}
	}()

	for i := range n {
		h, frame := rx.read()
		if h.ID != smpp.CmdDeliverSM {
			t.Fatalf("frame #%d: %s, want a deliver_sm", i, fmtHeader(h))
		}
		if got, want := frame[smpp.HeaderLen:], deliverBody(fmt.Sprint(i)); !bytes.Equal(got, want) {
			t.Fatalf("deliver_sm #%d carries %q, want %q: not in call order", i, got, want)
		}
		// The response names the request it answers in its message_id.
		rx.write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte(fmt.Sprint(i, "\x00"))))
	}
	i := 0
	for sd := range sends {
		select {
		case f := <-sd.resp:
			if got, want := string(f[smpp.HeaderLen:]), fmt.Sprint(i, "\x00"); got != want {
				t.Errorf("response to request #%d names %q, want %q", i, got, want)
			}
		case <-timeAfter():
			t.Fatalf("no response to request #%d", i)
		}
		sd.cancel()
		i++
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if i != n {
		t.Fatalf("%d requests sent, want %d", i, n)
	}
	if p := pendingLen(s); p != 0 {
		t.Errorf("pending after every response = %d, want 0", p)
	}
}

// unstartedSession is a session nobody reads or writes, with its write
// queue full: Send and Request must wait for room.
func unstartedSession(t *testing.T) *Session {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	s := newSession(newTestServer(nil), a)
	t.Cleanup(func() { s.close(ReasonKicked) })
	for len(s.out) < cap(s.out) {
		s.out <- outFrame{b: smpp.EncodeSimple(smpp.CmdEnquireLink, smpp.StatusOK, 1, nil)}
	}
	return s
}

// Send honours ctx and the session's end while it waits for room in the
// write queue, and leaves nothing behind when it gives up.
func TestSessionSendFullQueue(t *testing.T) {
	t.Parallel()
	// checkClean verifies that a failed Send queued nothing and left no
	// pending entry.
	checkClean := func(t *testing.T, s *Session, queued int) {
		t.Helper()
		if n := pendingLen(s); n != 0 {
			t.Errorf("pending after the failed Send = %d, want 0", n)
		}
		if len(s.out) != queued {
			t.Errorf("write queue holds %d frames, want %d (nothing added)", len(s.out), queued)
		}
	}

	t.Run("expired context", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		resp, forget, err := s.Send(ctx, smpp.CmdDeliverSM, deliverBody("late"))
		if !errors.Is(err, context.DeadlineExceeded) || resp != nil || forget != nil {
			t.Errorf("Send() = %v, %v, %v; want nil, nil, %v", resp, forget != nil, err, context.DeadlineExceeded)
		}
		checkClean(t, s, cap(s.out))
	})

	t.Run("context ends while waiting", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, _, err := s.Send(ctx, smpp.CmdDeliverSM, deliverBody("late"))
			errc <- err
		}()
		awaitErr(t, errc, context.DeadlineExceeded, "Send()", "Send waited for room in the write queue past its deadline")
		if d := time.Since(start); d < 40*time.Millisecond {
			t.Errorf("Send returned after %v, before the deadline", d)
		}
		checkClean(t, s, cap(s.out))
	})

	t.Run("cancelled while waiting", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, _, err := s.Send(ctx, smpp.CmdDeliverSM, deliverBody("late"))
			errc <- err
		}()
		waitFor(t, "Send to register its request", func() bool { return pendingLen(s) == 1 })
		cancel()
		awaitErr(t, errc, context.Canceled, "Send()", "Send did not return after its context was cancelled")
		checkClean(t, s, cap(s.out))
	})

	t.Run("session closes while waiting", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		errc := make(chan error, 1)
		go func() {
			_, _, err := s.Send(context.Background(), smpp.CmdDeliverSM, deliverBody("lost"))
			errc <- err
		}()
		waitFor(t, "Send to register its request", func() bool { return pendingLen(s) == 1 })
		s.Kick()
		awaitErr(t, errc, ErrSessionClosed, "Send()", "Send did not return after Kick")
		checkClean(t, s, cap(s.out))
	})

	t.Run("room comes", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		type result struct {
			resp <-chan []byte
			err  error
		}
		res := make(chan result, 1)
		go func() {
			resp, _, err := s.Send(context.Background(), smpp.CmdDeliverSM, deliverBody("waited"))
			res <- result{resp, err}
		}()
		waitFor(t, "Send to register its request", func() bool { return pendingLen(s) == 1 })
		select {
		case r := <-res:
			t.Fatalf("Send() = %v with the write queue full", r.err)
		case <-time.After(20 * time.Millisecond):
		}
		<-s.out // the writer takes a frame
		select {
		case r := <-res:
			if r.err != nil || r.resp == nil {
				t.Fatalf("Send() = %v, %v; want a response channel", r.resp, r.err)
			}
		case <-timeAfter():
			t.Fatalf("Send did not return once the write queue had room")
		}
		var last outFrame
		for len(s.out) > 0 {
			last = <-s.out
		}
		if h := smpp.ParseHeader(last.b); h.ID != smpp.CmdDeliverSM || !bytes.Equal(last.b[smpp.HeaderLen:], deliverBody("waited")) {
			t.Errorf("last frame queued is %s, want the deliver_sm", fmtHeader(h))
		}
	})

	t.Run("request honours its context", func(t *testing.T) {
		t.Parallel()
		s := unstartedSession(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.Request(ctx, smpp.CmdDeliverSM, deliverBody("late"))
			done <- err
		}()
		awaitErr(t, done, context.DeadlineExceeded, "Request()", "Request waited for room in the write queue past its deadline")
		checkClean(t, s, cap(s.out))
	})
}

// On a closed session Send fails at once with ErrSessionClosed, even with
// room in the queue or an ended context.
func TestSessionSendClosed(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	s := newSession(newTestServer(nil), a)
	s.Kick()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []context.Context{context.Background(), ctx} {
		if _, _, err := s.Send(c, smpp.CmdDeliverSM, nil); !errors.Is(err, ErrSessionClosed) {
			t.Errorf("Send on a closed session = %v, want %v", err, ErrSessionClosed)
		}
	}
	if n := pendingLen(s); n != 0 || len(s.out) != 0 {
		t.Errorf("pending %d, queued %d after Send on a closed session; want 0, 0", n, len(s.out))
	}
}
