package smppclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// fakeSMSC is a small SMSC for tests: it answers binds, answers submits at
// once with "id-N" unless onSubmit says otherwise, answers enquire_link
// (unless silent) and unbind, and counts what it received.
type fakeSMSC struct {
	t    testing.TB
	ln   net.Listener
	addr string

	// Behaviour, set before the pool binds.
	bindStatus smpp.Status
	bindHang   bool // never answer a bind
	silent     bool // answer no enquire_link
	// dropAfterBind closes every connection right after its bind_resp.
	dropAfterBind bool
	// onSubmit handles every request other than bind, enquire_link and
	// unbind; nil answers it at once with status 0 and "id-N".
	onSubmit func(c *fakeConn, h smpp.Header, frame []byte)

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*fakeConn]struct{}
	last  *fakeConn
	done  bool

	binds, submits, enquires, unbinds, ids atomic.Int64
	outstanding, maxOutstanding            atomic.Int64
	fromClient                             chan smpp.Header // responses received from the client
}

type fakeConn struct {
	s   *fakeSMSC
	nc  net.Conn
	wmu sync.Mutex
}

func newFakeSMSC(t testing.TB) *fakeSMSC {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, ln)
}

func serveFake(t testing.TB, ln net.Listener) *fakeSMSC {
	f := &fakeSMSC{t: t, ln: ln, addr: ln.Addr().String(), conns: map[*fakeConn]struct{}{}, fromClient: make(chan smpp.Header, 64)}
	f.wg.Go(f.acceptLoop)
	t.Cleanup(f.close)
	return f
}

func (f *fakeSMSC) acceptLoop() {
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			return
		}
		c := &fakeConn{s: f, nc: nc}
		f.mu.Lock()
		if f.done {
			f.mu.Unlock()
			_ = nc.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.last = c
		f.mu.Unlock()
		f.wg.Go(func() { c.serve() })
	}
}

// close stops the server and waits for its goroutines.
func (f *fakeSMSC) close() {
	f.mu.Lock()
	f.done = true
	f.mu.Unlock()
	_ = f.ln.Close()
	f.dropConns()
	f.wg.Wait()
}

// dropConns closes every open connection from the server side.
func (f *fakeSMSC) dropConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.nc.Close()
		delete(f.conns, c)
	}
}

// lastConn is the most recently accepted connection.
func (f *fakeSMSC) lastConn() *fakeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// goAfter runs fn after d in a goroutine the server waits for on close.
// The sleep deliberately lets time pass (a late answer); it synchronises
// nothing.
func (f *fakeSMSC) goAfter(d time.Duration, fn func()) {
	f.wg.Go(func() {
		time.Sleep(d)
		fn()
	})
}

func (c *fakeConn) serve() {
	defer func() {
		_ = c.nc.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	}()
	for {
		frame, err := smpp.ReadFrame(c.nc, 0)
		if err != nil {
			return
		}
		h := smpp.ParseHeader(frame)
		switch {
		case h.IsResponse():
			select {
			case c.s.fromClient <- h:
			default:
			}
		case h.ID == smpp.CmdBindTransceiver || h.ID == smpp.CmdBindTransmitter || h.ID == smpp.CmdBindReceiver:
			c.s.binds.Add(1)
			if c.s.bindHang {
				continue
			}
			c.write(smpp.EncodeSimple(h.ID|smpp.RespBit, c.s.bindStatus, h.Sequence, []byte("fake\x00")))
			if c.s.dropAfterBind {
				return
			}
		case h.ID == smpp.CmdEnquireLink:
			c.s.enquires.Add(1)
			if !c.s.silent {
				c.write(smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
			}
		case h.ID == smpp.CmdUnbind:
			c.s.unbinds.Add(1)
			c.write(smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
			return
		default:
			c.s.submits.Add(1)
			n := c.s.outstanding.Add(1)
			for {
				m := c.s.maxOutstanding.Load()
				if n <= m || c.s.maxOutstanding.CompareAndSwap(m, n) {
					break
				}
			}
			if c.s.onSubmit != nil {
				c.s.onSubmit(c, h, frame)
			} else {
				c.answer(h, smpp.StatusOK)
			}
		}
	}
}

func (c *fakeConn) write(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.nc.Write(b)
}

// answer responds to a request taken by onSubmit: submit_sm_resp (and
// data_sm_resp) with a fresh "id-N" when status is 0, query_sm_resp with
// "id-9", an empty body otherwise.
func (c *fakeConn) answer(h smpp.Header, status smpp.Status) {
	c.s.outstanding.Add(-1)
	var body []byte
	switch {
	case h.ID == smpp.CmdQuerySM:
		body = []byte("id-9\x00\x00\x02\x00")
	case status == smpp.StatusOK && (h.ID == smpp.CmdSubmitSM || h.ID == smpp.CmdDataSM):
		body = fmt.Appendf(nil, "id-%d\x00", c.s.ids.Add(1))
	default:
		body = []byte{0}
	}
	c.write(smpp.EncodeSimple(h.ID|smpp.RespBit, status, h.Sequence, body))
}

// submitFrame is a minimal valid submit_sm.
func submitFrame(seq uint32) []byte {
	body := []byte("\x00\x01\x01src\x00\x01\x01dst\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02hi")
	return smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, seq, body)
}

// newPool starts a pool on f with test-friendly timings; mut adjusts cfg.
func newPool(t *testing.T, addr string, mut func(*Config)) *Pool {
	t.Helper()
	return startPool(t, testConfig(t, addr, mut), nil)
}

// testConfig is the configuration of newPool.
func testConfig(t *testing.T, addr string, mut func(*Config)) Config {
	cfg := Config{
		Name: "up", Address: addr, SystemID: "sys", Password: "pw", InstanceID: "test",
		ResponseTimeout: 5 * time.Second, RouteWait: 2 * time.Second, EnquireLink: 10 * time.Second,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
		Logger:  testLogger(t),
	}
	if mut != nil {
		mut(&cfg)
	}
	return cfg
}

// startPool starts a pool for cfg whose connections are wrapped by wrap
// (when not nil) and closes it when the test ends.
func startPool(t *testing.T, cfg Config, wrap func(net.Conn) net.Conn) *Pool {
	t.Helper()
	p := New(cfg)
	p.wrapConn = wrap
	p.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return p
}

// testLogger logs warnings and errors through t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// eventually waits up to 5s for cond (testkit.Eventually).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, cond, "waiting for "+what)
}

func waitUp(t *testing.T, p *Pool, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d sessions up", n), func() bool { return p.Up() == n })
}

// checkLeaks fails the test if goroutines started during it outlive it.
// Register it first so that its cleanup runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	testkit.CheckLeaks(t, 3*time.Second)
}

func submit(p *Pool, prefer string) (Response, error) {
	return p.Submit(context.Background(), prefer, submitFrame, nil)
}

// recvFromClient waits for the next response the client sent to the fake.
func recvFromClient(t *testing.T, f *fakeSMSC) smpp.Header {
	t.Helper()
	select {
	case h := <-f.fromClient:
		return h
	case <-time.After(5 * time.Second):
		t.Fatal("no response from the client")
		return smpp.Header{}
	}
}

var errTest = errors.New("test error")

// startFake registers the goroutine-leak check (first, so that it runs
// last) and starts a fake SMSC.
func startFake(t *testing.T) *fakeSMSC {
	t.Helper()
	checkLeaks(t)
	return newFakeSMSC(t)
}
