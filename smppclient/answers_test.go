package smppclient

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// An SMSC that answers a submit_sm with a generic_nack (it could not take
// the PDU) has not accepted it, even when the nack's status says 0: the
// submit gets an error status and no message id, never an acceptance.
func TestAGenericNackIsNeverAnAcceptance(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.s.outstanding.Add(-1)
		c.write(smpp.GenericNack(smpp.StatusOK, h.Sequence))
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if err != nil || r.Status != smpp.StatusSysErr || r.MessageID != "" {
		t.Errorf("submit answered by generic_nack(0) = status %v, id %q, %v; want ESME_RSYSERR, no id", r.Status, r.MessageID, err)
	}
}

// A response of another command that carries a submit's sequence number
// (an SMSC's mistake) is not the submit's answer: the submit waits on for
// its own, and takes that.
func TestAResponseOfAnotherCommandIsNotTheSubmitsAnswer(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte{0}))
		c.answer(h, smpp.StatusInvDstAdr)
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusInvDstAdr {
		t.Errorf("submit = status %v, %v; want its own submit_sm_resp's status (ESME_RINVDSTADR)", r.Status, err)
	}
}

// failAfterFirst, once armed, writes only the first frame of the next
// write that carries several, waits until the SMSC has accepted every
// submit written so far, that one included, and the pool has read their
// answers, and then fails: a batch of submits whose first one the SMSC
// answered before the connection broke. (It waited for the pool's first
// answer at all, which an earlier round may have read already: the write
// then failed before the frame's answer was read, and the test failed now
// and then.)
type failAfterFirst struct {
	net.Conn
	armed             atomic.Bool
	written           int64        // submit_sm frames written
	accepted, answers func() int64 // by the SMSC; read by the pool
}

func (c *failAfterFirst) Write(b []byte) (int, error) {
	l := int(binary.BigEndian.Uint32(b))
	if !c.armed.Load() || l >= len(b) {
		c.written += submits(b)
		return c.Conn.Write(b)
	}
	c.armed.Store(false)
	c.written += submits(b[:l])
	n, err := c.Conn.Write(b[:l])
	if err != nil {
		return n, err
	}
	testkit.Poll(5*time.Second, func() bool { return c.accepted() >= c.written && c.answers() >= c.written })
	return n, errors.New("connection reset by peer")
}

// submits counts the submit_sm frames in b (whole frames).
func submits(b []byte) int64 {
	n := int64(0)
	for len(b) >= smpp.HeaderLen {
		h := smpp.ParseHeader(b)
		if h.ID == smpp.CmdSubmitSM {
			n++
		}
		b = b[min(int(h.Length), len(b)):]
		if h.Length == 0 {
			break
		}
	}
	return n
}

// A submit the SMSC answered is given that answer even when the write of
// the batch it went out in failed afterwards on the frames behind it: not
// "session lost" (which would make an accepted message unknown).
func TestASubmitAnsweredBeforeItsBatchsWriteFailedGetsItsAnswer(t *testing.T) {
	f := startFake(t)
	var (
		mu   sync.Mutex
		conn *failAfterFirst
		p    *Pool
	)
	p = startPool(t, testConfig(t, f.addr, func(c *Config) { c.Window = 8 }), func(nc net.Conn) net.Conn {
		mu.Lock()
		defer mu.Unlock()
		conn = &failAfterFirst{Conn: nc, accepted: func() int64 { return int64(f.ids.Load()) }, answers: func() int64 { return int64(p.stats.responses.Load()) }}
		return conn
	})
	waitUp(t, p, 1)
	mu.Lock()
	c := conn
	mu.Unlock()
	c.armed.Store(true)
	// Rounds of four submits at once, until the writer has sent several
	// in one write (it sends what is queued together).
	ok := 0
	for round := 0; c.armed.Load(); round++ {
		if round == 50 {
			t.Fatal("the writer never sent several submits in one write")
		}
		start := make(chan struct{})
		res := make(chan error, 4)
		for range 4 {
			go func() {
				<-start
				_, err := submit(p, "")
				res <- err
			}()
		}
		close(start)
		for range 4 {
			if err := <-res; err == nil {
				ok++
			}
		}
	}
	if accepted := int(f.ids.Load()); accepted != ok {
		t.Errorf("the SMSC accepted %d submit(s) and %d Submit returned an answer; want every accepted one answered", accepted, ok)
	}
}
