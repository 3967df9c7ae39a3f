package smppclient

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// An SMSC that answers a submit_sm with a generic_nack whose status says 0
// has not accepted it, nor refused it: the submit gets no acceptance and
// no message id, and its outcome is unknown (taken for a temporary error,
// as before, the retry could be a second message: from review).
func TestAGenericNackIsNeverAnAcceptance(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.s.outstanding.Add(-1)
		c.write(smpp.GenericNack(smpp.StatusOK, h.Sequence))
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if !Ambiguous(err) || !errors.Is(err, ErrUnclearAnswer) || r.MessageID != "" {
		t.Errorf("submit answered by generic_nack(0) = status %v, id %q, %v; want its outcome unknown, no id", r.Status, r.MessageID, err)
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

// An SMSC that accepts a submit but answers with a message id longer than
// any SMPP version allows has broken the protocol after the submit reached
// it: the submit is ambiguous (never "not sent", so never resent), and the
// id, which no store index could hold, is not passed on.
func TestAnAcceptanceWithAnOverlongMessageIDIsAmbiguous(t *testing.T) {
	f := startFake(t)
	long := strings.Repeat("x", MaxMessageIDLen+1)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.s.outstanding.Add(-1)
		c.write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte(long+"\x00")))
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	r, err := submit(p, "")
	if !Ambiguous(err) || errors.Is(err, ErrNotSent) || !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("submit answered with a %d-octet id: err %v; want ErrBadAnswer, ambiguous", len(long), err)
	}
	if r.MessageID != "" || r.Session == "" || r.Sequence == 0 {
		t.Errorf("response = id of %d octets, session %q, sequence %d; want no id, the request's session and sequence", len(r.MessageID), r.Session, r.Sequence)
	}
	if st := p.Stats(); st.BadAnswers != 1 {
		t.Errorf("Stats().BadAnswers = %d, want 1", st.BadAnswers)
	}
}

// The longest id SMPP's limits allow and beyond, up to MaxMessageIDLen, is
// an acceptance as usual: some SMSCs exceed the 65 octets a little.
func TestAnAcceptanceWithALongButBoundedMessageIDIsAccepted(t *testing.T) {
	f := startFake(t)
	id := strings.Repeat("y", MaxMessageIDLen)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
		c.s.outstanding.Add(-1)
		c.write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte(id+"\x00")))
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusOK || r.MessageID != id {
		t.Errorf("submit = status %v, id of %d octets, %v; want accepted with the %d-octet id", r.Status, len(r.MessageID), err, len(id))
	}
}

// A late acceptance (after the submit's timeout) with an overlong id is not
// reported as a late answer: the record it would resolve stays unknown.
func TestALateAcceptanceWithAnOverlongMessageIDIsNotReported(t *testing.T) {
	f := startFake(t)
	held := make(chan smpp.Header, 2)
	f.onSubmit = func(_ *fakeConn, h smpp.Header, _ []byte) { held <- h }
	late := make(chan Response, 2)
	p := newPool(t, f.addr, func(c *Config) {
		c.ResponseTimeout = 100 * time.Millisecond
		c.OnLateResponse = func(session string, seq uint32, r Response) { late <- r }
	})
	waitUp(t, p, 1)
	for range 2 {
		if _, err := submit(p, ""); !errors.Is(err, ErrTimeout) {
			t.Fatalf("submit = %v, want a timeout", err)
		}
	}
	h1, h2 := <-held, <-held
	c := f.lastConn()
	c.s.outstanding.Add(-1)
	c.write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusOK, h1.Sequence, []byte(strings.Repeat("x", MaxMessageIDLen+1)+"\x00")))
	c.answer(h2, smpp.StatusOK)
	select {
	case lr := <-late:
		if lr.Sequence != h2.Sequence || lr.MessageID == "" {
			t.Errorf("first late answer reported: sequence %d, id of %d octets; want the second submit's (sequence %d) with its id", lr.Sequence, len(lr.MessageID), h2.Sequence)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the good late answer was not reported")
	}
}

// gatedThenCut, once armed, holds its next Write until released, and cuts
// the Write after that one short after its first frame, failing it: a
// batch of which the kernel took one frame.
type gatedThenCut struct {
	net.Conn
	armed   atomic.Bool
	held    chan struct{} // closed when the gated Write is held
	release chan struct{}
	writes  atomic.Int32
}

func (c *gatedThenCut) Write(b []byte) (int, error) {
	if !c.armed.Load() {
		return c.Conn.Write(b)
	}
	switch c.writes.Add(1) {
	case 1:
		close(c.held)
		<-c.release
		return c.Conn.Write(b)
	case 2:
		l := int(binary.BigEndian.Uint32(b))
		n, _ := c.Conn.Write(b[:min(l, len(b))])
		return n, errors.New("write: broken pipe")
	}
	return 0, errors.New("write: broken pipe")
}

// A write that fails after the kernel took some of a batch's bytes leaves
// ambiguous only the frames that began within those bytes: the frames
// wholly behind them never left the process, so they are "not sent" (and
// retried elsewhere), not unknown.
func TestFramesBehindWhatAFailedWriteTookAreNotSent(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {} // never answers
	conn := &gatedThenCut{held: make(chan struct{}), release: make(chan struct{})}
	p := startPool(t, testConfig(t, f.addr, func(c *Config) { c.Window = 8 }), func(nc net.Conn) net.Conn {
		conn.Conn = nc
		return conn
	})
	waitUp(t, p, 1)
	conn.armed.Store(true)
	res := make(chan error, 8)
	go func() { _, err := submit(p, ""); res <- err }()
	<-conn.held // the first submit's write is held: the others queue behind it
	for range 7 {
		go func() { _, err := submit(p, ""); res <- err }()
	}
	eventually(t, "eight submits in flight", func() bool {
		ss := p.Sessions()
		return len(ss) == 1 && ss[0].InFlight == 8
	})
	close(conn.release)
	ambiguous, notSent := 0, 0
	for range 8 {
		switch err := <-res; {
		case Ambiguous(err):
			ambiguous++
		case errors.Is(err, ErrNotSent):
			notSent++
		default:
			t.Errorf("submit = %v, want ambiguous or not sent", err)
		}
	}
	// The held write's frame and the one frame of the cut write reached
	// the SMSC; the six behind it did not.
	eventually(t, "the SMSC read the two frames written", func() bool { return f.submits.Load() == 2 })
	if ambiguous != 2 || notSent != 6 {
		t.Errorf("%d ambiguous, %d not sent; want 2 (the frames written) and 6", ambiguous, notSent)
	}
}

// An acceptance whose body is not a clean C-Octet string (a second NUL, no
// NUL at all, TLVs cut short) still gives the id it begins with: an empty
// id would leave the message's receipts unmatched.
func TestAnAcceptanceWithAnUntidyBodyKeepsItsMessageID(t *testing.T) {
	for name, body := range map[string]string{
		"trailing NUL": "abc123\x00\x00",
		"no NUL":       "abc123",
		"cut-off TLV":  "abc123\x00\x04\x24",
	} {
		t.Run(name, func(t *testing.T) {
			f := startFake(t)
			f.onSubmit = func(c *fakeConn, h smpp.Header, frame []byte) {
				c.s.outstanding.Add(-1)
				c.write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte(body)))
			}
			p := newPool(t, f.addr, nil)
			waitUp(t, p, 1)
			if r, err := submit(p, ""); err != nil || r.Status != smpp.StatusOK || r.MessageID != "abc123" {
				t.Errorf("submit answered with body %q = status %v, id %q, %v; want accepted as abc123", body, r.Status, r.MessageID, err)
			}
		})
	}
}

// A response that carries the sequence number of a request whose frame is
// not written yet (the journal is being written) cannot be its answer: it
// is dropped, and the request takes the answer to its frame. (Taken, a
// bogus temporary error made the proxy send the message again.)
func TestAResponseBeforeTheRequestIsWrittenIsNotItsAnswer(t *testing.T) {
	f := startFake(t)
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	before := p.stats.lateResponses.Load()
	r, err := p.Submit(context.Background(), "", submitFrame, func(session string, seq uint32) error {
		f.lastConn().write(smpp.EncodeSimple(smpp.CmdSubmitSM|smpp.RespBit, smpp.StatusThrottled, seq, []byte{0}))
		eventually(t, "the early response read", func() bool { return p.stats.lateResponses.Load() > before || p.stats.responses.Load() > 0 })
		return nil
	})
	if err != nil || r.Status != smpp.StatusOK || r.MessageID != "id-1" {
		t.Errorf("Submit = status %v, id %q, %v; want the SMSC's acceptance of the frame (id-1), not the response that came before it", r.Status, r.MessageID, err)
	}
}
