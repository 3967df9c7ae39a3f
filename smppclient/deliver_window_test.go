package smppclient

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// blockingDeliver is an OnDeliver that reports every call on entered and
// returns 0 once release is closed.
func blockingDeliver(entered chan<- uint32, release <-chan struct{}) func(context.Context, Delivery) smpp.Status {
	return func(ctx context.Context, d Delivery) smpp.Status {
		entered <- smpp.ParseHeader(d.Frame).Sequence
		select {
		case <-release:
			return smpp.StatusOK
		case <-ctx.Done():
			return smpp.StatusSysErr
		}
	}
}

// closeOnce closes c unless it is closed.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// sendDeliverBurst writes n deliver_sm with sequence numbers first, first+1, … in one
// write, as an SMSC flushing its receipts does.
func sendDeliverBurst(c *fakeConn, first uint32, n int) {
	var b bytes.Buffer
	for i := range n {
		b.Write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, first+uint32(i), deliverBody))
	}
	c.write(b.Bytes())
}

// awaitEntered waits until n deliveries are running in OnDeliver; an
// answer sent to the SMSC before that (a refusal) fails the test.
func awaitEntered(t *testing.T, f *fakeSMSC, entered <-chan uint32, n int) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for got := 0; got < n; {
		select {
		case <-entered:
			got++
		case h := <-f.fromClient:
			t.Fatalf("with %d of %d deliveries running, the client answered seq %d with %v", got, n, h.Sequence, h.Status)
		case <-timeout:
			t.Fatalf("%d of %d deliveries reached OnDeliver", got, n)
		}
	}
}

// A burst of receipts larger than the submit window is taken whole: the
// deliveries being stored at once are bounded by DeliverWindow (default
// 1000), not by Window, so an SMSC sending 50 receipts at once gets 50
// answers with status 0 and no ESME_RTHROTTLED.
func TestReceiptBurstBeyondTheSubmitWindowIsAllAccepted(t *testing.T) {
	f := startFake(t)
	entered := make(chan uint32, 100)
	release := make(chan struct{})
	p := newPool(t, f.addr, func(c *Config) {
		c.Window = 10
		c.OnDeliver = blockingDeliver(entered, release)
	})
	t.Cleanup(func() { closeOnce(release) }) // before the pool's Close
	waitUp(t, p, 1)
	sendDeliverBurst(f.lastConn(), 100, 50)
	awaitEntered(t, f, entered, 50)
	closeOnce(release)
	for range 50 {
		if h := recvFromClient(t, f); h.ID != smpp.CmdDeliverSM|smpp.RespBit || h.Status != smpp.StatusOK {
			t.Errorf("deliver_sm seq %d answered %v (command 0x%08X), want 0", h.Sequence, h.Status, h.ID)
		}
	}
	if st := p.Stats(); st.Deliveries != 50 || st.DeliverRefused != 0 {
		t.Errorf("Stats: %d deliveries, %d refused; want 50, 0", st.Deliveries, st.DeliverRefused)
	}
}

// DeliverWindow bounds the deliveries running at once over every session
// of the upstream: with 50 running on two binds, the next ones are refused
// with ESME_RTHROTTLED at once (the SMSC redelivers them), and none of the
// running ones is.
func TestDeliveriesBeyondTheDeliverWindowAreThrottled(t *testing.T) {
	f := startFake(t)
	entered := make(chan uint32, 100)
	release := make(chan struct{})
	p := newPool(t, f.addr, func(c *Config) {
		c.Binds, c.Window, c.DeliverWindow = 2, 10, 50
		c.OnDeliver = blockingDeliver(entered, release)
	})
	t.Cleanup(func() { closeOnce(release) })
	waitUp(t, p, 2)
	f.mu.Lock()
	var conns []*fakeConn
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	sendDeliverBurst(conns[0], 1, 30)
	sendDeliverBurst(conns[1], 1001, 30)
	refused := map[uint32]bool{}
	timeout := time.After(5 * time.Second)
	for running := 0; running < 50 || len(refused) < 10; {
		select {
		case <-entered:
			running++
		case h := <-f.fromClient:
			if h.Status != smpp.StatusThrottled {
				t.Fatalf("deliver_sm seq %d answered %v while every delivery is running, want ESME_RTHROTTLED", h.Sequence, h.Status)
			}
			refused[h.Sequence] = true
		case <-timeout:
			t.Fatalf("%d deliveries running, %d refused; want 50 and 10", running, len(refused))
		}
	}
	closeOnce(release)
	for range 50 {
		if h := recvFromClient(t, f); h.Status != smpp.StatusOK || refused[h.Sequence] {
			t.Errorf("deliver_sm seq %d answered %v after release, want 0 once", h.Sequence, h.Status)
		}
	}
	if st := p.Stats(); st.Deliveries != 50 || st.DeliverRefused != 10 {
		t.Errorf("Stats: %d deliveries, %d refused; want 50, 10", st.Deliveries, st.DeliverRefused)
	}
}
