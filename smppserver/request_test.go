package smppserver

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// deliverBody is a deliver_sm body (same layout as submit_sm).
func deliverBody(text string) []byte { return submitBody(text) }

// Session.Request sends a server-originated request and returns the ESME's
// response frame, matched by sequence number.
func TestSessionRequest(t *testing.T) {
	t.Parallel()
	// A session is announced (listed by ReceiversOf) just after its
	// bind_resp is queued, so the ESME may read the bind_resp first: wait
	// for the three OnBound calls before asking.
	bound := make(chan struct{}, 3)
	srv, addr := startServer(t, nil, func(s *Server) { s.OnBound = func(*Session) { bound <- struct{}{} } })
	rx := dialBound(t, addr, smpp.CmdBindReceiver)
	dialBound(t, addr, smpp.CmdBindTransmitter)
	other := dialESME(t, addr)
	other.mustBind(smpp.CmdBindTransceiver, "solo")
	for range 3 {
		select {
		case <-bound:
		case <-timeAfter():
			t.Fatal("OnBound not called for each of the three binds")
		}
	}

	recv := srv.ReceiversOf("shop")
	if len(recv) != 1 || recv[0] != sessionOf(t, srv, rx) {
		t.Fatalf("ReceiversOf(shop) = %v, want only the RX session", recv)
	}

	type result struct {
		frame []byte
		err   error
	}
	res := make(chan result, 1)
	go func() {
		f, err := recv[0].Request(context.Background(), smpp.CmdDeliverSM, deliverBody("receipt"))
		res <- result{f, err}
	}()

	h, frame := rx.read()
	if h.ID != smpp.CmdDeliverSM || !bytes.Equal(frame[smpp.HeaderLen:], deliverBody("receipt")) {
		t.Fatalf("ESME got %s body %q, want the deliver_sm", fmtHeader(h), frame[smpp.HeaderLen:])
	}
	// An unrelated response (wrong sequence) is not taken for the answer.
	rx.write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence+1000, []byte{0}))
	resp := smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte{0})
	rx.write(resp)
	select {
	case r := <-res:
		if r.err != nil || !bytes.Equal(r.frame, resp) {
			t.Errorf("Request() = %x, %v; want %x, nil", r.frame, r.err, resp)
		}
	case <-timeAfter():
		t.Fatalf("Request did not return after the deliver_sm_resp")
	}
	rx.expectOpen("after deliver_sm_resp")
}

func TestSessionRequestEnds(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil)

	t.Run("context expires", func(t *testing.T) {
		c := dialBound(t, addr, smpp.CmdBindTransceiver)
		s := sessionOf(t, srv, c)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := s.Request(ctx, smpp.CmdDeliverSM, deliverBody("unanswered")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Request unanswered = %v, want %v", err, context.DeadlineExceeded)
		}
	})

	t.Run("session closes while waiting", func(t *testing.T) {
		c := dialBound(t, addr, smpp.CmdBindTransceiver)
		s := sessionOf(t, srv, c)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Request(context.Background(), smpp.CmdDeliverSM, deliverBody("lost"))
			errc <- err
		}()
		c.read() // the deliver_sm
		s.Kick()
		awaitErr(t, errc, ErrSessionClosed, "Request on a kicked session", "Request did not return after Kick")
	})

	t.Run("session already closed", func(t *testing.T) {
		c := dialBound(t, addr, smpp.CmdBindTransceiver)
		s := sessionOf(t, srv, c)
		s.Kick()
		waitClosed(t, s)
		if _, err := s.Request(context.Background(), smpp.CmdDeliverSM, nil); !errors.Is(err, ErrSessionClosed) {
			t.Errorf("Request on a closed session = %v, want %v", err, ErrSessionClosed)
		}
	})
}
