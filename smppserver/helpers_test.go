package smppserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	esmeclient "github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// ioTimeout bounds every single wait in these tests; nothing that works
// takes more than a few milliseconds, so it only matters when a test fails.
const ioTimeout = 2 * time.Second

// RunLocalServer serves srv on 127.0.0.1:0 in a goroutine until the test
// ends, then closes it (miekg/dns server_test.go style).
func RunLocalServer(t testing.TB, srv *Server) (addr string) {
	t.Helper()
	addr, _ = runLocalServer(t, srv)
	return addr
}

// runLocalServer is RunLocalServer that also reports what Serve returned.
func runLocalServer(t testing.TB, srv *Server) (addr string, served <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return serveOn(t, srv, l)
}

// serveOn serves srv on l until the test ends, then closes it.
func serveOn(t testing.TB, srv *Server, l net.Listener) (addr string, served <-chan error) {
	t.Helper()
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case <-done:
		case <-time.After(ioTimeout):
			t.Errorf("Serve did not return after Close")
		}
	})
	return l.Addr().String(), errc
}

// Test accounts: "shop" may bind any number of times, "solo" once.
const (
	password = "secret"
	sysID    = "proxy-test"
)

func testAuth(_ context.Context, r BindRequest) (*Principal, smpp.Status) {
	if r.Password != password {
		return nil, smpp.StatusBindFail
	}
	switch r.SystemID {
	case "shop":
		return &Principal{Account: "shop"}, smpp.StatusOK
	case "solo":
		return &Principal{Account: "solo", MaxBinds: 1}, smpp.StatusOK
	case "narrow":
		return &Principal{Account: "narrow", Window: 2}, smpp.StatusOK
	}
	return nil, smpp.StatusBindFail
}

// okHandler answers submit_sm with message_id "id-<sequence>" and every
// other request with its own *_resp and status 0.
var okHandler = HandlerFunc(func(_ context.Context, w ResponseWriter, r *Request) {
	if r.Header.ID == smpp.CmdSubmitSM {
		_ = w.WriteFrame(smpp.SubmitResp(smpp.StatusOK, r.Header.Sequence, fmt.Sprintf("id-%d", r.Header.Sequence)))
		return
	}
	_ = w.WriteStatus(smpp.StatusOK)
})

// newTestServer returns a server with short timeouts, the test accounts
// and h (okHandler when nil). Tests adjust fields before RunLocalServer.
func newTestServer(h Handler) *Server {
	if h == nil {
		h = okHandler
	}
	return &Server{
		Handler:      h,
		Auth:         AuthFunc(testAuth),
		SystemID:     sysID,
		BindTimeout:  ioTimeout,
		EnquireLink:  time.Minute,
		WriteTimeout: ioTimeout,
	}
}

// esme is a raw SMPP client for protocol tests: it writes frames as given,
// synchronously on the connection (so a test may close or half-close it
// right after), and reads every inbound frame through a package esme client
// in Raw mode, which answers nothing by itself. Methods must be called from
// the test goroutine.
type esme struct {
	t    testing.TB
	conn net.Conn
	c    *esmeclient.Client
	seq  uint32
}

func dialESME(t testing.TB, addr string) *esme {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return newESME(t, c)
}

// newESME runs the raw client over an established connection.
func newESME(t testing.TB, conn net.Conn) *esme {
	c := esmeclient.NewClient(conn, esmeclient.Options{Raw: true, Timeout: ioTimeout, MaxPDUSize: 1 << 20})
	t.Cleanup(c.Close)
	return &esme{t: t, conn: conn, c: c}
}

// dialBound dials addr and binds as shop with kind; the bind must succeed.
func dialBound(t testing.TB, addr string, kind uint32) *esme {
	t.Helper()
	c := dialESME(t, addr)
	c.mustBind(kind, "shop")
	return c
}

func (c *esme) nextSeq() uint32 {
	c.seq++
	return c.seq
}

// write writes b. Once the server has closed the connection the reader has
// closed the socket too; b is then dropped, as the server would never read
// it, and the next read reports the close.
func (c *esme) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.conn.Write(b); err != nil {
		if errors.Is(err, net.ErrClosed) && isClosedErr(c.c.Err()) {
			return
		}
		c.t.Fatalf("write: %v", err)
	}
}

// send writes a request with the next sequence number and returns it.
func (c *esme) send(id uint32, body []byte) uint32 {
	c.t.Helper()
	seq := c.nextSeq()
	c.write(smpp.EncodeSimple(id, smpp.StatusOK, seq, body))
	return seq
}

// read returns the next frame from the server.
func (c *esme) read() (smpp.Header, []byte) {
	c.t.Helper()
	h, frame, err := c.tryRead(ioTimeout)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return h, frame
}

func (c *esme) tryRead(d time.Duration) (smpp.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	frame, err := c.c.ReadRaw(ctx)
	if err != nil {
		return smpp.Header{}, nil, err
	}
	return smpp.ParseHeader(frame), frame, nil
}

// expect reads the next frame and checks its command, sequence and status.
func (c *esme) expect(what string, id, seq uint32, status smpp.Status) []byte {
	c.t.Helper()
	h, frame := c.read()
	if h.ID != id || h.Sequence != seq || h.Status != status {
		c.t.Fatalf("%s: got %s, want %s", what, fmtHeader(h), fmtHeader(smpp.Header{ID: id, Sequence: seq, Status: status}))
	}
	return frame
}

// expectClosed reads until the server closes the connection; any frame
// read meanwhile is a failure.
func (c *esme) expectClosed(what string) {
	c.t.Helper()
	h, _, err := c.tryRead(ioTimeout)
	switch {
	case err == nil:
		c.t.Fatalf("%s: got %s, want the connection closed", what, fmtHeader(h))
	case isClosedErr(err):
	default:
		c.t.Fatalf("%s: read error %v, want the connection closed", what, err)
	}
}

// expectOpen checks that the connection is still served: an enquire_link
// is answered. The server's own enquire_links (a server with EnquireLink
// set sends them when it likes) are answered and passed over meanwhile.
func (c *esme) expectOpen(what string) {
	c.t.Helper()
	seq := c.send(smpp.CmdEnquireLink, nil)
	for {
		h, _ := c.read()
		if h.ID == smpp.CmdEnquireLink {
			c.write(smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
			continue
		}
		if h.ID != smpp.CmdEnquireLink|smpp.RespBit || h.Sequence != seq || h.Status != smpp.StatusOK {
			c.t.Fatalf("%s: enquire_link: got %s, want %s", what, fmtHeader(h), fmtHeader(smpp.Header{ID: smpp.CmdEnquireLink | smpp.RespBit, Sequence: seq}))
		}
		return
	}
}

// isClosedErr reports a connection the server closed between frames: the
// client's read ended with the peer's close or a reset. A partial frame
// before the close (io.ErrUnexpectedEOF), a timeout or a close of our own
// does not count.
func isClosedErr(err error) bool {
	if !errors.Is(err, esmeclient.ErrClosed) || err == esmeclient.ErrClosed {
		return false
	}
	return !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed)
}

// bind sends a bind of the given kind and returns the response header and
// the system_id in it.
func (c *esme) bind(kind uint32, systemID, pass string) (smpp.Header, string) {
	c.t.Helper()
	seq := c.send(kind, bindBody(systemID, pass))
	h, frame := c.read()
	if h.ID != kind|smpp.RespBit || h.Sequence != seq {
		c.t.Fatalf("bind: got %s, want a %#x response to sequence %d", fmtHeader(h), kind|smpp.RespBit, seq)
	}
	body := frame[smpp.HeaderLen:]
	sid, _, _ := strings.Cut(string(body), "\x00")
	return h, sid
}

// mustBind binds and fails the test unless the bind succeeds.
func (c *esme) mustBind(kind uint32, systemID string) {
	c.t.Helper()
	if h, _ := c.bind(kind, systemID, password); h.Status != smpp.StatusOK {
		c.t.Fatalf("bind %s: status = %v, want %v", systemID, h.Status.String(), smpp.StatusOK.String())
	}
}

// submit sends a submit_sm and checks it is answered with status.
func (c *esme) submit(what string, status smpp.Status) {
	c.t.Helper()
	seq := c.send(smpp.CmdSubmitSM, submitBody("hello"))
	c.expect(what, smpp.CmdSubmitSM|smpp.RespBit, seq, status)
}

func fmtHeader(h smpp.Header) string {
	return fmt.Sprintf("{id %#08x seq %d status %s}", h.ID, h.Sequence, h.Status.String())
}

// bindBody is the body of a bind_*: system_id, password, system_type,
// interface_version 0x34, addr_ton, addr_npi, address_range.
func bindBody(systemID, pass string) []byte { return bindBodyType(systemID, pass, "") }

// bindBodyType is bindBody with a system_type.
func bindBodyType(systemID, pass, systemType string) []byte {
	b := append([]byte(systemID), 0)
	b = append(b, pass...)
	b = append(b, 0)
	b = append(b, systemType...)
	b = append(b, 0)
	b = append(b, 0x34, 0, 0) // interface_version, addr_ton, addr_npi
	return append(b, 0)       // address_range ""
}

// submitBody is a minimal valid submit_sm body carrying text.
func submitBody(text string) []byte {
	b := []byte{0, 1, 1} // service_type "", source ton, npi
	b = append(b, "4477001\x00"...)
	b = append(b, 1, 1)
	b = append(b, "4477002\x00"...)
	b = append(b, 0, 0, 0)    // esm_class, protocol_id, priority_flag
	b = append(b, 0, 0)       // schedule_delivery_time, validity_period
	b = append(b, 0, 0, 0, 0) // registered_delivery, replace_if_present, data_coding, sm_default_msg_id
	b = append(b, byte(len(text)))
	return append(b, text...)
}

// timeAfter fires after ioTimeout.
func timeAfter() <-chan time.Time { return time.After(ioTimeout) }

// waitFor waits up to ioTimeout for cond (testkit.Eventually).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, ioTimeout, cond, "waiting for "+what)
}

// sessionOf returns the server's session for the client connection c.
func sessionOf(t testing.TB, srv *Server, c *esme) *Session {
	t.Helper()
	var found *Session
	waitFor(t, "the server session of "+c.conn.LocalAddr().String(), func() bool {
		for _, s := range srv.Sessions() {
			if s.RemoteAddr().String() == c.conn.LocalAddr().String() {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

// waitClosed waits for s to end and returns its CloseReason.
func waitClosed(t testing.TB, s *Session) CloseReason {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(ioTimeout):
		t.Fatalf("session %s did not end", s.ID())
	}
	return s.CloseReason()
}

// sessionEvent is one OnBound (up) or OnClosed (down) call.
type sessionEvent struct {
	id      string
	up      bool
	account string
	bind    smpp.BindType
	reason  CloseReason
}

// recorder collects OnBound and OnClosed calls.
type recorder struct {
	mu     sync.Mutex
	events []sessionEvent
	ch     chan sessionEvent
}

func newRecorder() *recorder { return &recorder{ch: make(chan sessionEvent, 100)} }

func (r *recorder) hook(s *Session, up bool) {
	ev := sessionEvent{id: s.ID(), up: up, account: s.Account(), bind: s.BindType(), reason: s.CloseReason()}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	r.ch <- ev
}

// runRecorded serves a test server (okHandler) whose OnBound and OnClosed
// calls are recorded, on 127.0.0.1:0 until the test ends.
func runRecorded(t testing.TB) (*Server, *recorder, string) {
	t.Helper()
	rec := newRecorder()
	srv := newTestServer(nil)
	rec.attach(srv)
	return srv, rec, RunLocalServer(t, srv)
}

// boundRecorded is runRecorded with one transceiver session bound on it
// and its OnBound call taken.
func boundRecorded(t testing.TB) (*Server, *recorder, *esme) {
	t.Helper()
	srv, rec, addr := runRecorded(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	if ev := rec.next(t); !ev.up {
		t.Fatalf("first hook call = %+v, want OnBound", ev)
	}
	return srv, rec, c
}

// attach sets srv's OnBound and OnClosed hooks to record into r.
func (r *recorder) attach(srv *Server) {
	srv.OnBound = func(s *Session) { r.hook(s, true) }
	srv.OnClosed = func(s *Session) { r.hook(s, false) }
}

// next returns the next OnBound or OnClosed call.
func (r *recorder) next(t testing.TB) sessionEvent {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(ioTimeout):
		t.Fatalf("no OnBound or OnClosed call")
		return sessionEvent{}
	}
}

// none checks that no OnBound or OnClosed call is pending.
func (r *recorder) none(t testing.TB, what string) {
	t.Helper()
	select {
	case ev := <-r.ch:
		t.Fatalf("%s: unexpected OnBound or OnClosed call %+v", what, ev)
	default:
	}
}

// awaitErr waits up to ioTimeout for the error of what on errc (late is the
// failure when none comes) and checks that it is want (nil: no error).
func awaitErr(t testing.TB, errc <-chan error, want error, what, late string) {
	t.Helper()
	awaitErrOr(t, errc, want, what, late, nil)
}

// awaitErrOr is awaitErr that runs abort (when not nil) before failing
// for want of an answer, to free what the test holds.
func awaitErrOr(t testing.TB, errc <-chan error, want error, what, late string, abort func()) {
	t.Helper()
	select {
	case err := <-errc:
		if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("%s = %v, want %v", what, err, want)
		}
	case <-timeAfter():
		if abort != nil {
			abort()
		}
		t.Fatal(late)
	}
}

// bindType is one kind of bind: the command, the bind type the session
// gets, and the answer to a submit_sm on it (a receiver may not submit).
type bindType struct {
	cmd    uint32
	bind   smpp.BindType
	submit smpp.Status
}

// bindTypes are the three binds, by name.
var bindTypes = map[string]bindType{
	"TX":  {smpp.CmdBindTransmitter, smpp.BindTransmitter, smpp.StatusOK},
	"RX":  {smpp.CmdBindReceiver, smpp.BindReceiver, smpp.StatusInvBndSts},
	"TRX": {smpp.CmdBindTransceiver, smpp.BindTransceiver, smpp.StatusOK},
}

// eachBindType runs f as a subtest per bind type, on a new connection to
// addr that is not bound yet.
func eachBindType(t *testing.T, addr string, f func(t *testing.T, name string, b bindType, c *esme)) {
	for name, b := range bindTypes {
		t.Run(name, func(t *testing.T) { f(t, name, b, dialESME(t, addr)) })
	}
}

// startServer runs newTestServer(h), adjusted by set, on 127.0.0.1 until
// the test ends.
func startServer(t testing.TB, h Handler, set ...func(*Server)) (*Server, string) {
	t.Helper()
	srv := newTestServer(h)
	for _, f := range set {
		f(srv)
	}
	return srv, RunLocalServer(t, srv)
}
