package smppclient

import (
	"context"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// An SMSC that unbinds while a deliver_sm it sent is being stored gets
// that deliver_sm's response before the unbind_resp: the session does not
// close under a delivery it took (the SMSC would send it again after the
// next bind, and an MO, never deduplicated, would reach the ESME twice).
func TestAPeerUnbindWaitsForTheDeliveriesBeingStored(t *testing.T) {
	f := startFake(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	p := newPool(t, f.addr, func(c *Config) {
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			entered <- struct{}{}
			<-release // the durable store write
			return smpp.StatusOK
		}
	})
	waitUp(t, p, 1)
	c := f.lastConn()
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
	<-entered
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 501, nil))
	eventually(t, "the unbind read", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.slots[0] != nil && CloseReason(p.slots[0].ending.Load()) == ReasonPeerUnbind
	})
	close(release)
	first, second := recvFromClient(t, f), recvFromClient(t, f)
	if first.ID != smpp.CmdDeliverSM|smpp.RespBit || first.Sequence != 500 || second.ID != smpp.CmdUnbind|smpp.RespBit || second.Sequence != 501 {
		t.Errorf("the SMSC got 0x%08X seq %d, then 0x%08X seq %d; want the deliver_sm_resp (500), then the unbind_resp (501)", first.ID, first.Sequence, second.ID, second.Sequence)
	}
}

// While a session that the SMSC unbound waits for its deliveries, new
// submits go to the pool's other binds, not to it.
func TestASessionTheSMSCUnboundTakesNoNewSubmits(t *testing.T) {
	f := startFake(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	p := newPool(t, f.addr, func(c *Config) {
		c.Binds = 2
		c.OnDeliver = func(ctx context.Context, d Delivery) smpp.Status {
			entered <- struct{}{}
			<-release
			return smpp.StatusOK
		}
	})
	waitUp(t, p, 2)
	c := f.lastConn()
	c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 500, deliverBody))
	<-entered
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, 501, nil))
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
	for range 4 {
		if r, err := submit(p, unbound.id); err != nil || r.Session == unbound.id {
			t.Errorf("submit = session %s, %v; want the other bind, not the unbinding %s", r.Session, err, unbound.id)
		}
	}
	close(release)
}
