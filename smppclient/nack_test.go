package smppclient

import (
	"context"
	"errors"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// A generic_nack whose sequence number is also that of a response this
// bind sent the SMSC lately (its deliver_sm numbers are its own, and meet
// ours) may be the SMSC's nack of that response: it does not settle the
// submit, whose outcome is unknown. Taken as the submit's answer (a
// temporary error), it made the record retryable, and the SMSC's real
// acceptance that followed was dropped as late: the retry was a second
// message (from review).
func TestANackThatMayAnswerOurResponseLeavesTheSubmitUnknown(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		// The SMSC sends a deliver_sm numbered as our submit, takes our
		// deliver_sm_resp for unexpected, nacks it, then accepts the submit
		// (apart from its reader, which takes the deliver_sm_resp).
		c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, h.Sequence, deliverBody))
		go func() {
			r := <-f.fromClient
			if r.ID != smpp.CmdDeliverSM|smpp.RespBit || r.Sequence != h.Sequence {
				t.Errorf("the SMSC got 0x%08X seq %d, want the deliver_sm_resp (%d)", r.ID, r.Sequence, h.Sequence)
			}
			c.write(smpp.GenericNack(smpp.StatusSysErr, h.Sequence))
			c.answer(h, smpp.StatusOK)
		}()
	}
	p := newPool(t, f.addr, func(c *Config) {
		c.Binds = 1
		c.OnDeliver = func(context.Context, Delivery) smpp.Status { return smpp.StatusOK }
	})
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if !Ambiguous(err) || !errors.Is(err, ErrUnclearAnswer) {
		t.Errorf("submit answered by a nack that may be of our response = %+v, %v; want its outcome unknown", r, err)
	}
}

// A generic_nack with an error status and a sequence number no response of
// ours had is the SMSC's answer to the submit: it settles it, as before.
// So does a nack 0x58 numbered as a response of ours: throttling speaks of
// the SMSC's load, not of a response it took amiss.
func TestANackOfTheSubmitItselfSettlesIt(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.write(smpp.GenericNack(smpp.StatusThrottled, h.Sequence))
	}
	p := newPool(t, f.addr, func(c *Config) { c.Binds = 1 })
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if err != nil || r.Status != smpp.StatusThrottled {
		t.Errorf("submit nacked with 0x58 = %+v, %v; want status 0x58", r, err)
	}
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.write(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, h.Sequence, deliverBody))
		go func() {
			<-f.fromClient // our deliver_sm_resp, numbered as the submit
			c.write(smpp.GenericNack(smpp.StatusThrottled, h.Sequence))
		}()
	}
	p2 := newPool(t, f.addr, func(c *Config) {
		c.Binds = 1
		c.OnDeliver = func(context.Context, Delivery) smpp.Status { return smpp.StatusOK }
	})
	waitUp(t, p2, 1)
	if r, err := submit(p2, ""); err != nil || r.Status != smpp.StatusThrottled {
		t.Errorf("submit nacked with 0x58, numbered as our response = %+v, %v; want status 0x58", r, err)
	}
}
