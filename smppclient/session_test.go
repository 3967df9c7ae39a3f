package smppclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

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
	eventually(t, "2 enquire_link", func() bool { return f.enquires.Load() >= 2 })
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

func testCerts(t *testing.T) (server, client *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "fake smsc"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: roots}
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
