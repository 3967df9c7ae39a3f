package smppserver

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

const enquireLink = 250 * time.Millisecond

// The server sends enquire_link after EnquireLink without traffic, and a
// session that answers it stays up past 3 × EnquireLink.
func TestServerSendsEnquireLinkWhenIdle(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, nil, func(s *Server) { s.EnquireLink = enquireLink })
	c := dialBound(t, addr, smpp.CmdBindTransceiver)

	lastTraffic := time.Now()
	for i := range 4 { // 4 rounds > 3 × EnquireLink
		h, _ := c.read()
		if h.ID != smpp.CmdEnquireLink {
			t.Fatalf("round %d: got %s, want an enquire_link from the server", i, fmtHeader(h))
		}
		if idle := time.Since(lastTraffic); idle < enquireLink-5*time.Millisecond {
			t.Errorf("round %d: enquire_link after %v without traffic, want at least %v", i, idle, enquireLink)
		}
		c.write(smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
		lastTraffic = time.Now()
	}
	c.expectOpen("session answering enquire_link")
}

// A session from which nothing arrives for 3 × EnquireLink is closed with
// ReasonIdleTimeout, even though the server keeps writing to it.
func TestIdleSessionIsClosed(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	srv := newTestServer(nil)
	srv.EnquireLink = enquireLink
	rec.attach(srv)
	addr := RunLocalServer(t, srv)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	bound := time.Now()
	if ev := rec.next(t); !ev.up {
		t.Fatalf("hook call = %+v, want OnBound", ev)
	}

	enquires := 0
	for {
		h, _, err := c.tryRead(ioTimeout)
		if err != nil {
			if !isClosedErr(err) {
				t.Fatalf("read: %v, want the connection closed", err)
			}
			break
		}
		if h.ID != smpp.CmdEnquireLink {
			t.Fatalf("got %s, want only enquire_link before the idle close", fmtHeader(h))
		}
		enquires++ // never answered
	}
	if idle := time.Since(bound); idle < 3*enquireLink-5*time.Millisecond {
		t.Errorf("idle session closed after %v, want at least 3 × %v", idle, enquireLink)
	}
	if enquires == 0 {
		t.Errorf("server sent no enquire_link before closing the idle session")
	}
	if ev := rec.next(t); ev.up || ev.reason != ReasonIdleTimeout {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonIdleTimeout)
	}
}

// A tiny EnquireLink must not crash the server (time.NewTicker panics on a
// non-positive interval).
func TestTinyEnquireLink(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, nil, func(s *Server) { s.EnquireLink = time.Nanosecond })
	c := dialESME(t, addr)
	c.expectOpen("unbound session on a server with EnquireLink = 1ns")
}
