package smppclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// deliverBody is the body of a minimal deliver_sm.
var deliverBody = []byte("\x00\x01\x01src\x00\x01\x01dst\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x02ok")

func TestRequestsFromUpstream(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, nil) // OnDeliver nil: answered 0
	waitUp(t, p, 1)
	c := f.lastConn()
	// alert_notification has no response: the next one seen is the
	// enquire_link_resp.
	c.write(smpp.EncodeSimple(smpp.CmdAlertNotif, 0, 76, []byte("\x01\x01a\x00\x01\x01b\x00")))
	tests := []struct {
		name string
		req  []byte
		want smpp.Header
	}{
		{"enquire_link", smpp.EncodeSimple(smpp.CmdEnquireLink, 0, 77, nil),
			smpp.Header{Length: 16, ID: smpp.CmdEnquireLink | smpp.RespBit, Status: smpp.StatusOK, Sequence: 77}},
		{"unknown command", smpp.EncodeSimple(0x00000099, 0, 78, nil),
			smpp.Header{Length: 16, ID: smpp.CmdGenericNack, Status: smpp.StatusInvCmdID, Sequence: 78}},
		{"submit_sm from the SMSC", submitFrame(79),
			smpp.Header{Length: 16, ID: smpp.CmdGenericNack, Status: smpp.StatusInvCmdID, Sequence: 79}},
		{"data_sm", smpp.EncodeSimple(smpp.CmdDataSM, 0, 80, []byte("\x00\x01\x01a\x00\x01\x01b\x00\x00\x00\x00")),
			smpp.Header{Length: 17, ID: smpp.CmdDataSM | smpp.RespBit, Status: smpp.StatusOK, Sequence: 80}},
	}
	for _, tt := range tests {
		c.write(tt.req)
		if got := recvFromClient(t, f); got != tt.want {
			t.Errorf("%s: client answered %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestDeliverAnsweredAfterOnDeliver(t *testing.T) {
	f := startFake(t)
	got := make(chan Delivery, 2)
	release := make(chan struct{})
	p := newPool(t, f.addr, func(c *Config) {
		c.DeliverWindow = 1
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			got <- d
			select {
			case <-release:
			case <-ctx.Done():
			}
			return smpp.StatusMsgQFul
		}
	})
	waitUp(t, p, 1)
	frame := smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 9, deliverBody)
	f.lastConn().write(frame)
	var d Delivery
	select {
	case d = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("OnDeliver not called")
	}
	if d.Upstream != "up" || d.Session != p.Sessions()[0].ID || !bytes.Equal(d.Frame, frame) {
		t.Errorf("OnDeliver got %+v", d)
	}
	// Beyond the delivery window (1) a delivery is refused at once with 0x58.
	f.lastConn().write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 10, deliverBody))
	want := smpp.Header{Length: 17, ID: smpp.CmdDeliverSM | smpp.RespBit, Status: smpp.StatusThrottled, Sequence: 10}
	if h := recvFromClient(t, f); h != want {
		t.Errorf("second deliver_sm answered %+v, want %+v", h, want)
	}
	select {
	case h := <-f.fromClient:
		t.Fatalf("deliver_sm_resp %+v sent before OnDeliver returned", h)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	want = smpp.Header{Length: 17, ID: smpp.CmdDeliverSM | smpp.RespBit, Status: smpp.StatusMsgQFul, Sequence: 9}
	if h := recvFromClient(t, f); h != want {
		t.Errorf("deliver_sm answered %+v, want %+v", h, want)
	}
	if st := p.Stats(); st.Deliveries != 1 || st.DeliverRefused != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}

func TestOnDeliverPanicAnswersSysErr(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, func(c *Config) {
		c.OnDeliver = func(context.Context, Delivery) smpp.Status { panic("boom") }
	})
	waitUp(t, p, 1)
	f.lastConn().write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 3, deliverBody))
	want := smpp.Header{Length: 17, ID: smpp.CmdDeliverSM | smpp.RespBit, Status: smpp.StatusSysErr, Sequence: 3}
	if h := recvFromClient(t, f); h != want {
		t.Errorf("deliver_sm answered %+v, want %+v", h, want)
	}
	if st := p.Stats(); st.DeliverPanics != 1 || p.Up() != 1 {
		t.Errorf("after a panic: Stats() = %+v, Up() = %d", st, p.Up())
	}
}

func TestEnquireLinkKeepsSessionUp(t *testing.T) {
	f := startFake(t)
	// Generous timings: a loaded machine may stall the process for a few
	// hundred milliseconds, and 3×EnquireLink of silence closes a session.
	p := newPool(t, f.addr, func(c *Config) { c.EnquireLink = 300 * time.Millisecond })
	waitUp(t, p, 1)
	// The pool counts an enquire_link once its write returned, which may be
	// after the SMSC read it: wait for both counts.
	eventually(t, "2 enquire_link", func() bool { return f.enquires.Load() >= 2 && p.Stats().EnquireLinks >= 2 })
	if st := p.Stats(); len(st.Closed) != 0 || f.binds.Load() != 1 || st.EnquireLinks < 2 {
		t.Errorf("with enquire_link answered: Stats() = %+v, binds = %d", st, f.binds.Load())
	}
}

func TestIdleSessionClosed(t *testing.T) {
	f := startFake(t)
	f.silent = true
	p := newPool(t, f.addr, func(c *Config) { c.EnquireLink = 30 * time.Millisecond })
	eventually(t, "an idle close and a rebind", func() bool {
		return p.Stats().Closed[ReasonIdleTimeout] >= 1 && f.binds.Load() >= 2
	})
}

func TestPeerUnbind(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	first := p.Sessions()[0].ID
	f.lastConn().write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 5, nil))
	want := smpp.Header{Length: 16, ID: smpp.CmdUnbind | smpp.RespBit, Status: smpp.StatusOK, Sequence: 5}
	if h := recvFromClient(t, f); h != want {
		t.Errorf("unbind answered %+v, want %+v", h, want)
	}
	eventually(t, "a rebind", func() bool {
		ss := p.Sessions()
		return p.Up() == 1 && ss[0].ID != first
	})
	if st := p.Stats(); st.Closed[ReasonPeerUnbind] != 1 {
		t.Errorf("Stats().Closed = %v, want one %v", st.Closed, ReasonPeerUnbind)
	}
}

func TestBindTimeout(t *testing.T) {
	f := startFake(t)
	f.bindHang = true
	p := newPool(t, f.addr, func(c *Config) { c.ConnectTimeout = 100 * time.Millisecond })
	eventually(t, "a bind timeout", func() bool {
		ss := p.Sessions()
		return p.Stats().BindFailures >= 1 && len(ss) == 1 && strings.Contains(ss[0].LastError, "timeout")
	})
}

func TestCloseWithExpiredContext(t *testing.T) {
	f := startFake(t)
	held := make(chan struct{}, 1)
	f.onSubmit = func(*fakeConn, smpp.Header, []byte) { held <- struct{}{} }
	p := New(Config{Name: "up", Address: f.addr, Logger: testLogger(t)})
	p.Start()
	waitUp(t, p, 1)
	res := make(chan error, 1)
	go func() { _, err := submit(p, ""); res <- err }()
	<-held
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want context.Canceled", err)
	}
	if err := <-res; !errors.Is(err, ErrSessionLost) {
		t.Errorf("Submit in flight at a hard Close = %v, want ErrSessionLost", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestTLS(t *testing.T) {
	checkLeaks(t)
	server, client := testCerts(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	f := serveFake(t, ln)
	p := newPool(t, f.addr, func(c *Config) { c.TLS = client })
	if r, err := submit(p, ""); err != nil || r.MessageID != "id-1" {
		t.Errorf("Submit over TLS = (%+v, %v)", r, err)
	}
}

// testCerts returns the fake SMSC's TLS configuration (a certificate for
// 127.0.0.1 of a throw-away CA) and a client's that trusts that CA alone.
func testCerts(t *testing.T) (server, client *tls.Config) {
	ca := testkit.NewCA(t)
	return &tls.Config{Certificates: []tls.Certificate{ca.Server(t)}}, &tls.Config{RootCAs: ca.Pool}
}

func TestSequenceNumbers(t *testing.T) {
	s := newSession(New(Config{}), "x", smpp.BindTransceiver)
	s.seq = maxSeq - 1
	for _, want := range []uint32{maxSeq, 1, 3} {
		if want == 3 {
			s.pending[2] = &pending{} // still outstanding: skipped
		}
		if got := s.nextSeqLocked(); got != want {
			t.Errorf("nextSeqLocked() = %d, want %d", got, want)
		}
	}
}

func TestAmbiguous(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrTimeout, true},
		{ErrSessionLost, true},
		{fmt.Errorf("%w: session x sequence 1", ErrTimeout), true},
		{notSent(ErrNoSession), false},
		{notSent(ErrBusy), false},
		{notSent(errSessionClosed), false},
		{notSent(ErrSessionLost), false}, // nothing written wins
		{errTest, false},
	}
	for _, tt := range tests {
		if got := Ambiguous(tt.err); got != tt.want {
			t.Errorf("Ambiguous(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 500*time.Millisecond, 30*time.Second
	for attempt := 1; attempt <= 40; attempt++ {
		ceil := min(hi, lo<<min(attempt-1, 10))
		for range 20 {
			if d := backoff(lo, hi, attempt); d < ceil/2 || d > ceil {
				t.Fatalf("backoff(%v, %v, %d) = %v, want in [%v, %v]", lo, hi, attempt, d, ceil/2, ceil)
			}
		}
	}
}

func TestCloseReasonString(t *testing.T) {
	for r := ReasonNone; r < reasonCount; r++ {
		if s := r.String(); s == "" || strings.HasPrefix(s, "CloseReason(") {
			t.Errorf("CloseReason(%d).String() = %q", int(r), s)
		}
	}
	if s := CloseReason(99).String(); s != "CloseReason(99)" {
		t.Errorf("CloseReason(99).String() = %q", s)
	}
}

// Per-PDU warnings about what an upstream sends — responses nobody waits
// for, deliveries beyond the delivery window, requests the proxy does not
// support — are logged once per interval per upstream and kind, with the
// count of the lines held back, so a misbehaving SMSC cannot flood the log.
func TestPerPDUWarningsFromAnUpstreamAreRateLimited(t *testing.T) {
	tests := map[string]struct {
		msg   string
		setup func(t *testing.T, c *fakeConn, p *Pool)
		flood func(c *fakeConn, n int)
		count func(Stats) uint64
	}{
		"responses with unknown sequence numbers": {
			msg: "late or unmatched response dropped",
			flood: func(c *fakeConn, n int) {
				var b bytes.Buffer
				for i := range n {
					b.Write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, 0, uint32(5000+i), []byte("x\x00")))
				}
				c.write(b.Bytes())
			},
			count: func(s Stats) uint64 { return s.LateResponses },
		},
		"deliveries beyond the delivery window": {
			msg: "delivery refused: deliver_window full",
			setup: func(t *testing.T, c *fakeConn, p *Pool) { // one delivery fills the window (1)
				sendDeliverBurst(c, 99, 1)
				eventually(t, "a delivery running", func() bool { return p.Stats().Deliveries == 1 })
			},
			flood: func(c *fakeConn, n int) { sendDeliverBurst(c, 100, n) },
			count: func(s Stats) uint64 { return s.DeliverRefused },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := startFake(t)
			clock := &testClock{t: time.Unix(1000, 0)}
			lines := testkit.NewLogLines()
			release := make(chan struct{})
			p := newPool(t, f.addr, func(c *Config) {
				c.Logger = slog.New(lines)
				c.Now = clock.Now
				c.DeliverWindow = 1
				c.OnDeliver = func(ctx context.Context, _ Delivery) smpp.Status {
					select {
					case <-release:
					case <-ctx.Done():
					}
					return smpp.StatusOK
				}
			})
			t.Cleanup(func() { closeOnce(release) })
			waitUp(t, p, 1)
			if tc.setup != nil {
				tc.setup(t, f.lastConn(), p)
			}
			tc.flood(f.lastConn(), 30)
			eventually(t, "30 PDUs handled", func() bool { return tc.count(p.Stats()) == 30 })
			if n, _ := lines.Count(tc.msg); n != 1 {
				t.Errorf("%d lines %q for 30 PDUs within one interval, want 1", n, tc.msg)
			}
			clock.Add(time.Minute)
			tc.flood(f.lastConn(), 1)
			eventually(t, "the next PDU handled", func() bool { return tc.count(p.Stats()) == 31 })
			// The PDU is counted just before its warning is logged.
			eventually(t, "a line after the interval", func() bool { n, _ := lines.Count(tc.msg); return n >= 2 })
			if n, sup := lines.Count(tc.msg); n != 2 || sup != 29 {
				t.Errorf("after the interval: %d lines, the last with suppressed=%d; want 2 lines, suppressed=29", n, sup)
			}
		})
	}
}

// Requests the proxy does not support are each answered generic_nack, and
// logged once per interval.
func TestUnsupportedRequestsFromAnUpstreamAreLoggedOncePerInterval(t *testing.T) {
	f := startFake(t)
	lines := testkit.NewLogLines()
	clock := &testClock{t: time.Unix(1000, 0)}
	p := newPool(t, f.addr, func(c *Config) { c.Logger, c.Now = slog.New(lines), clock.Now })
	waitUp(t, p, 1)
	var b bytes.Buffer
	for i := range 30 {
		b.Write(smpp.EncodeSimple(0x00000099, 0, uint32(700+i), nil))
	}
	f.lastConn().write(b.Bytes())
	for range 30 {
		if h := recvFromClient(t, f); h.ID != smpp.CmdGenericNack || h.Status != smpp.StatusInvCmdID {
			t.Fatalf("unsupported request answered %+v, want generic_nack ESME_RINVCMDID", h)
		}
	}
	if n, _ := lines.Count("unsupported request from upstream"); n != 1 {
		t.Errorf("%d lines for 30 unsupported requests within one interval, want 1", n)
	}
}
