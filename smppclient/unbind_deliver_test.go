package smppclient

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// waitUnbindRead waits until a bind of p has read the SMSC's unbind and
// returns it.
func waitUnbindRead(t *testing.T, p *Pool) *session {
	t.Helper()
	var unbound *session
	eventually(t, "the unbind read", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, s := range p.slots {
			if s != nil && CloseReason(s.ending.Load()) == ReasonPeerUnbind {
				unbound = s
				return true
			}
		}
		return false
	})
	return unbound
}

// heldDeliveries starts a pool of binds binds on f whose deliveries are
// held until release is closed (the durable store write); entered tells
// when one is.
func heldDeliveries(t *testing.T, f *fakeSMSC, binds int) (p *Pool, entered, release chan struct{}) {
	t.Helper()
	entered, release = make(chan struct{}, 1), make(chan struct{})
	p = newPool(t, f.addr, func(c *Config) {
		c.Binds = binds
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			entered <- struct{}{}
			<-release
			return smpp.StatusOK
		}
	})
	waitUp(t, p, binds)
	return p, entered, release
}

// An SMSC that unbinds while a deliver_sm it sent is being stored gets
// that deliver_sm's response before the unbind_resp: the session does not
// close under a delivery it took (the SMSC would send it again after the
// next bind, and an MO, never deduplicated, would reach the ESME twice).
func TestAPeerUnbindWaitsForTheDeliveriesBeingStored(t *testing.T) {
	f, _, release := unbindWhileStoring(t)
	close(release)
	expectDeliverThenUnbindResp(t, f, 500, 501)
}

// expectDeliverThenUnbindResp checks that the SMSC gets the deliver_sm_resp
// numbered deliver, then the unbind_resp numbered unbind.
func expectDeliverThenUnbindResp(t *testing.T, f *fakeSMSC, deliver, unbind uint32) {
	t.Helper()
	first, second := recvFromClient(t, f), recvFromClient(t, f)
	if first.ID != smpp.CmdDeliverSM|smpp.RespBit || first.Sequence != deliver || second.ID != smpp.CmdUnbind|smpp.RespBit || second.Sequence != unbind {
		t.Errorf("the SMSC got 0x%08X seq %d, then 0x%08X seq %d; want the deliver_sm_resp (%d), then the unbind_resp (%d)", first.ID, first.Sequence, second.ID, second.Sequence, deliver, unbind)
	}
}

// While a session that the SMSC unbound waits for its deliveries, new
// submits go to the pool's other binds, not to it.
func TestASessionTheSMSCUnboundTakesNoNewSubmits(t *testing.T) {
	f := startFake(t)
	p, entered, release := heldDeliveries(t, f, 2)
	c := f.lastConn()
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
	<-entered
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 501, nil))
	unbound := waitUnbindRead(t, p)
	for range 4 {
		if r, err := submit(p, unbound.id); err != nil || r.Session == unbound.id {
			t.Errorf("submit = session %s, %v; want the other bind, not the unbinding %s", r.Session, err, unbound.id)
		}
	}
	close(release)
}

// A submit that chose a bind before the SMSC unbound it, and reaches its
// writer after, is not written to the unbinding SMSC (which would refuse
// it, 0x04, a permanent error): it is not sent, and retried elsewhere.
func TestASubmitReachingAnUnbindingBindIsNotWritten(t *testing.T) {
	f := startFake(t)
	p, entered, release := heldDeliveries(t, f, 1)
	defer close(release)
	c := f.lastConn()
	_, err := p.Submit(context.Background(), "", submitFrame, func(session string, seq uint32) error {
		// While the journal is written, the SMSC sends an MO and unbinds.
		c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
		<-entered
		c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 501, nil))
		waitUnbindRead(t, p)
		return nil
	})
	if !errors.Is(err, ErrNotSent) || f.submits.Load() != 0 {
		t.Errorf("submit reaching the writer of an unbinding bind = %v, SMSC got %d; want not sent, none", err, f.submits.Load())
	}
	if up := p.Up(); up != 0 {
		t.Errorf("Up() = %d while the only bind unbinds, want 0", up)
	}
}

// Closing the pool while the SMSC's unbind waits for deliveries does not
// wait out response_timeout: both wait for the same deliveries, which end
// at once.
func TestClosingThePoolDuringAPeerUnbindEndsWithTheDeliveries(t *testing.T) {
	f := startFake(t)
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	p := New(testConfig(t, f.addr, func(c *Config) {
		c.DeliverWindow, c.ResponseTimeout = 2, time.Hour
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			entered <- struct{}{}
			<-release
			return smpp.StatusOK
		}
	}))
	p.Start()
	waitUp(t, p, 1)
	c := f.lastConn()
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 501, deliverBody))
	<-entered
	<-entered
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 502, nil))
	waitUnbindRead(t, p)
	closed := make(chan struct{})
	go func() { _ = p.Close(context.Background()); close(closed) }()
	eventually(t, "Close started", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.closed })
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the deliveries ended (response_timeout is an hour)")
	}
}

// unbindWhileStoring starts a bind on a fake SMSC that sends a deliver_sm
// (500), held while it is stored until release is closed, then unbinds
// (501); it returns once the unbind is read.
func unbindWhileStoring(t *testing.T) (*fakeSMSC, *fakeConn, chan struct{}) {
	t.Helper()
	f := startFake(t)
	p, entered, release := heldDeliveries(t, f, 1)
	c := f.lastConn()
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
	<-entered
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 501, nil))
	waitUnbindRead(t, p)
	return f, c, release
}

// Unbinds the SMSC repeats while its first waits for the deliveries being
// stored start nothing: the first one's answer closes the session. Each
// started a goroutine that lived until the deliveries ended (up to
// response_timeout), for 16 bytes of the SMSC's each.
func TestRepeatedPeerUnbindsWhileTheFirstWaitsStartNothing(t *testing.T) {
	f, c, release := unbindWhileStoring(t)
	before := runtime.NumGoroutine()
	var frames []byte
	for seq := uint32(1000); seq < 2000; seq++ {
		frames = append(frames, smpp.EncodeSimple(smpp.CmdUnbind, 0, seq, nil)...)
	}
	c.write(frames)
	// Read after all of them: its answer shows they were.
	c.write(smpp.EncodeSimple(smpp.CmdEnquireLink, 0, 2000, nil))
	if h := recvFromClient(t, f); h.ID != smpp.CmdEnquireLink|smpp.RespBit || h.Sequence != 2000 {
		t.Fatalf("after the unbinds the SMSC got 0x%08X seq %d, want the enquire_link_resp (2000)", h.ID, h.Sequence)
	}
	if grown := runtime.NumGoroutine() - before; grown > 100 {
		t.Errorf("1000 repeated unbinds left %d goroutines more, want none of their own", grown)
	}
	close(release)
	expectDeliverThenUnbindResp(t, f, 500, 501)
}

// An SMSC that unbinds while submits it took are unanswered, and answers
// them before it reads the unbind_resp (maintenance: unbind, then flush),
// has those answers taken: the unbind_resp waits for them. It went out at
// once, the session closed under them, and each became unknown (from
// review).
func TestAPeerUnbindWaitsForTheAnswersOfTheSubmitsWritten(t *testing.T) {
	f := startFake(t)
	var pool atomic.Pointer[Pool]
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 700, nil))
		go func() {
			// The answer follows once the unbind was read.
			for !peerUnbound(pool.Load()) {
				runtime.Gosched()
			}
			c.answer(h, smpp.StatusOK)
		}()
	}
	p := newPool(t, f.addr, func(c *Config) { c.Binds = 1 })
	pool.Store(p)
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if err != nil || r.Status != smpp.StatusOK || r.MessageID == "" {
		t.Fatalf("a submit the SMSC answered after its unbind = %+v, %v; want its acceptance", r, err)
	}
	if h := recvFromClient(t, f); h.ID != smpp.CmdUnbind|smpp.RespBit || h.Sequence != 700 {
		t.Errorf("then the SMSC got 0x%08X seq %d, want the unbind_resp (700)", h.ID, h.Sequence)
	}
}

// peerUnbound reports whether a bind of p has read the SMSC's unbind.
func peerUnbound(p *Pool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if s != nil && s.peerUnbound.Load() {
			return true
		}
	}
	return false
}
