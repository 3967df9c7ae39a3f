package esme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// TestMain fails the run if any Client goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := testkit.LeftRunning(2*time.Second, "esme.(*Client)"); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked esme goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// startSim runs a simulator on 127.0.0.1:0 for the test.
func startSim(t *testing.T, cfg sim.Config) *sim.Simulator {
	t.Helper()
	return proxytest.StartSim(t, cfg)
}

func dial(t *testing.T, addr string, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, o)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestBindAndSubmit(t *testing.T) {
	s := startSim(t, sim.Config{SystemID: "acme", Password: "secret"})
	c := dial(t, s.Addr(), Options{SystemID: "acme", Password: "secret", Bind: smpp.BindTransmitter})
	if got := c.ServerSystemID(); got != "smscsim" {
		t.Errorf("ServerSystemID() = %q, want smscsim", got)
	}
	r, err := c.Submit(context.Background(), Submit{Src: "Shop", Dst: "447700900001", Text: []byte("OTP 1234"), Key: "order-1"})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if r.Status != smpp.StatusOK || r.MessageID == "" || r.Nack {
		t.Fatalf("Submit = %+v, want ESME_ROK with a message id", r)
	}
	if r.Seq != 2 { // 1 was the bind
		t.Errorf("Submit seq = %d, want 2", r.Seq)
	}
	if got := s.Count("order-1"); got != 1 {
		t.Errorf("sim.Count(order-1) = %d, want 1", got)
	}
}

func TestBindRefused(t *testing.T) {
	s := startSim(t, sim.Config{SystemID: "acme", Password: "secret"})
	_, err := Dial(context.Background(), s.Addr(), Options{SystemID: "acme", Password: "wrong"})
	if !IsStatus(err, smpp.StatusBindFail) || !errors.Is(err, smpp.StatusBindFail) {
		t.Fatalf("Dial with a wrong password: err = %v, want ESME_RBINDFAIL", err)
	}
	if _, err := Dial(context.Background(), s.Addr(), Options{Bind: smpp.BindType(9)}); err == nil {
		t.Fatal("Dial with bind type xx: no error")
	}
}

func TestKeyTLV(t *testing.T) {
	s := startSim(t, sim.Config{KeyTag: 0x1401})
	c := dial(t, s.Addr(), Options{})
	ctx := context.Background()
	for _, sub := range []Submit{
		{Dst: "1", Text: []byte("a"), Key: "k-custom", KeyTag: 0x1401},
		{Dst: "1", Text: []byte("b"), Key: "k-default"}, // 0x1400: not the simulator's tag
		{Dst: "1", Text: []byte("c")},
	} {
		if r, err := c.Submit(ctx, sub); err != nil || r.Status != smpp.StatusOK {
			t.Fatalf("Submit(%q) = %+v, %v", sub.Key, r, err)
		}
	}
	if got := s.Count("k-custom"); got != 1 {
		t.Errorf("sim.Count(k-custom) = %d, want 1", got)
	}
	counts := s.Counts()
	if len(counts) != 3 {
		t.Errorf("sim counted %d keys (%v), want 3", len(counts), counts)
	}
	for k := range counts {
		if k != "k-custom" && !strings.HasPrefix(k, "sm:") {
			t.Errorf("sim counted key %q; only k-custom travels in tag 0x1401", k)
		}
	}
}

func TestSubmitEncoding(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 300)
	tests := []struct {
		name    string
		sub     Submit
		wantUD  []byte
		wantESM byte
		wantSeg string
	}{
		{"short", Submit{Text: []byte("hi"), Key: "k"}, []byte("hi"), 0, ""},
		{"payload", Submit{Text: long, Key: "k"}, long, 0, ""},
		{"udh", Submit{Text: []byte("part"), UDH: []byte{5, 0, 3, 9, 2, 1}, Key: "k"}, append([]byte{5, 0, 3, 9, 2, 1}, "part"...), 0x40, "1/2"},
	}
	for _, tt := range tests {
		frame := tt.sub.Frame(42)
		p, err := smpp.ParseSubmit(frame)
		if err != nil {
			t.Fatalf("%s: ParseSubmit: %v", tt.name, err)
		}
		if p.Header.Sequence != 42 || p.Header.ID != smpp.CmdSubmitSM || int(p.Header.Length) != len(frame) {
			t.Errorf("%s: header = %+v", tt.name, p.Header)
		}
		if !bytes.Equal(p.UserData(), tt.wantUD) {
			t.Errorf("%s: UserData() = %q, want %q", tt.name, p.UserData(), tt.wantUD)
		}
		if p.EsmClass != tt.wantESM {
			t.Errorf("%s: esm_class = 0x%02X, want 0x%02X", tt.name, p.EsmClass, tt.wantESM)
		}
		if g := p.Segment().String(); g != tt.wantSeg {
			t.Errorf("%s: Segment() = %q, want %q", tt.name, g, tt.wantSeg)
		}
		if v, ok := p.TLV(smpp.DefaultIdempotencyTag); !ok || string(v) != "k" {
			t.Errorf("%s: key TLV = %q, %v", tt.name, v, ok)
		}
	}
}

func TestExplicitSequence(t *testing.T) {
	release := make(chan struct{})
	s := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.Key == "slow" {
			<-release
		}
		return sim.Action{}
	}})
	c := dial(t, s.Addr(), Options{})
	ctx := context.Background()
	r, err := c.Submit(ctx, Submit{Dst: "1", Text: []byte("x"), Key: "a", Seq: 777})
	if err != nil || r.Seq != 777 || r.Status != smpp.StatusOK {
		t.Fatalf("Submit(Seq 777) = %+v, %v", r, err)
	}
	slow := c.SubmitAsync(ctx, Submit{Dst: "1", Text: []byte("x"), Key: "slow", Seq: 900})
	waitFor(t, func() bool { return s.Count("slow") == 1 })
	if _, err := c.Submit(ctx, Submit{Dst: "1", Text: []byte("y"), Key: "b", Seq: 900}); !errors.Is(err, ErrSeqInUse) {
		t.Errorf("Submit with a pending sequence number: err = %v, want ErrSeqInUse", err)
	}
	close(release)
	if res := <-slow; res.Err != nil || res.Resp.Seq != 900 {
		t.Errorf("SubmitAsync(Seq 900) = %+v", res)
	}
	// A sequence number may be reused once its request completed.
	if r, err := c.Submit(ctx, Submit{Dst: "1", Text: []byte("y"), Key: "c", Seq: 900}); err != nil || r.Seq != 900 {
		t.Errorf("Submit reusing 900 = %+v, %v", r, err)
	}
}

func TestReceipts(t *testing.T) {
	s := startSim(t, sim.Config{DLRDelay: 10 * time.Millisecond})
	c := dial(t, s.Addr(), Options{})
	r, err := c.Submit(context.Background(), Submit{Src: "Shop", Dst: "447700900002", Text: []byte("x"), Key: "dlr-1", RegisteredDelivery: 1})
	if err != nil || r.Status != smpp.StatusOK {
		t.Fatalf("Submit = %+v, %v", r, err)
	}
	select {
	case d := <-c.Receipts():
		if !d.IsReceipt() || d.ReceiptedID != r.MessageID || d.Stat != "DELIVRD" || d.MessageState != 2 {
			t.Errorf("receipt = {receipt %v, id %q, stat %q, state %d}, want a DELIVRD receipt for %q", d.IsReceipt(), d.ReceiptedID, d.Stat, d.MessageState, r.MessageID)
		}
		if d.Src != "447700900002" || d.Dst != "Shop" {
			t.Errorf("receipt addresses = %s → %s, want swapped", d.Src, d.Dst)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no receipt within 5s")
	}
}

func TestWindowedConcurrency(t *testing.T) {
	s := startSim(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Delay: time.Millisecond} }})
	c := dial(t, s.Addr(), Options{Window: 8})
	const workers, each = 16, 25
	var mu sync.Mutex
	ids := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				r, err := c.Submit(context.Background(), Submit{Dst: "1", Text: []byte(key), Key: key})
				if err == nil && r.Status != smpp.StatusOK {
					err = fmt.Errorf("status %s", r.Status)
				}
				if err != nil {
					errs <- fmt.Errorf("Submit(%s): %w", key, err)
					continue
				}
				mu.Lock()
				ids[r.MessageID] = key
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(ids) != workers*each {
		t.Errorf("%d distinct message ids, want %d", len(ids), workers*each)
	}
	if got := s.Total(); got != workers*each {
		t.Errorf("sim.Total() = %d, want %d", got, workers*each)
	}
	if d := s.Duplicates(); len(d) != 0 {
		t.Errorf("sim.Duplicates() = %v", d)
	}
}

// A request past its context's deadline fails with ErrTimeout, and the
// answer that comes later is counted as late, not matched to anything.
// The client binds with the default (generous) timeout; only the request
// has the short one.
func TestRequestPastItsDeadlineTimesOutAndItsLateAnswerIsCounted(t *testing.T) {
	s := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.Key == "slow" {
			return sim.Action{Delay: 200 * time.Millisecond}
		}
		return sim.Action{}
	}})
	c := dial(t, s.Addr(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := c.Submit(ctx, Submit{Dst: "1", Text: []byte("x"), Key: "slow"})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit past its deadline: err = %v, want ErrTimeout", err)
	}
	waitFor(t, func() bool { return c.Stats().Late == 1 })
}

// Options.Timeout bounds a request's wait for its answer when the context
// has no deadline; the answer that comes after is counted as late. The
// peer answers only once the client has given up, so the outcome does not
// depend on how fast anything runs (and no bind is involved: Options.Timeout
// also bounds the bind).
func TestOptionsTimeoutBoundsARequestWithoutADeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c := NewClient(nc, Options{Timeout: 100 * time.Millisecond})
	defer c.Close()
	if _, err := c.Submit(context.Background(), Submit{Dst: "1", Text: []byte("x"), Key: "slow"}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Submit past Options.Timeout: err = %v, want ErrTimeout", err)
	}
	frame, err := smpp.ReadFrame(peer, 0)
	if err != nil {
		t.Fatalf("peer reading the submit: %v", err)
	}
	if _, err := peer.Write(smpp.SubmitResp(smpp.StatusOK, smpp.ParseHeader(frame).Sequence, "late-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Stats().Late == 1 })
}

func TestRawMode(t *testing.T) {
	s := startSim(t, sim.Config{})
	c := dial(t, s.Addr(), Options{Raw: true, NoBind: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Before bind: enquire_link is answered, a submit gets ESME_RINVBNDSTS.
	if err := c.SendRaw(smpp.EncodeSimple(smpp.CmdEnquireLink, 0, 5, nil)); err != nil {
		t.Fatal(err)
	}
	f, err := c.ReadRaw(ctx)
	if h := smpp.ParseHeader(f); err != nil || h.ID != smpp.CmdEnquireLink|smpp.RespBit || h.Sequence != 5 {
		t.Fatalf("ReadRaw after enquire_link = %+v, %v", h, err)
	}
	resp, err := c.Do(ctx, Submit{Dst: "1", Text: []byte("x")}.Frame(6))
	if h := smpp.ParseHeader(resp); err != nil || h.Status != smpp.StatusInvBndSts || h.Sequence != 6 {
		t.Fatalf("Do(submit before bind) = %+v, %v; want ESME_RINVBNDSTS", h, err)
	}
	// An unknown command id gets generic_nack 0x03.
	resp, err = c.Do(ctx, smpp.EncodeSimple(0x00000999, 0, 7, nil))
	if h := smpp.ParseHeader(resp); err != nil || h.ID != smpp.CmdGenericNack || h.Status != smpp.StatusInvCmdID {
		t.Fatalf("Do(unknown command) = %+v, %v; want generic_nack ESME_RINVCMDID", h, err)
	}
	if err := c.Bind(ctx); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	r, err := c.Submit(ctx, Submit{Dst: "1", Text: []byte("x"), Key: "raw"})
	if err != nil || r.Status != smpp.StatusOK {
		t.Fatalf("Submit after Bind = %+v, %v", r, err)
	}
	if _, err := dial(t, s.Addr(), Options{}).ReadRaw(ctx); !errors.Is(err, ErrNotRaw) {
		t.Errorf("ReadRaw without Raw: err = %v, want ErrNotRaw", err)
	}
}

func TestUnbindAndClose(t *testing.T) {
	s := startSim(t, sim.Config{})
	c := dial(t, s.Addr(), Options{})
	ctx := context.Background()
	if err := c.EnquireLink(ctx); err != nil {
		t.Fatalf("EnquireLink: %v", err)
	}
	if err := c.Unbind(ctx); err != nil {
		t.Fatalf("Unbind: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Unbind")
	}
	if _, err := c.Submit(ctx, Submit{Dst: "1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Unbind: err = %v, want ErrClosed", err)
	}
	if _, ok := <-c.Receipts(); ok {
		t.Error("Receipts not closed after Unbind")
	}
}

func TestPeerGoneFailsPending(t *testing.T) {
	s := startSim(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Drop: true} }})
	c := dial(t, s.Addr(), Options{})
	res := c.SubmitAsync(context.Background(), Submit{Dst: "1", Text: []byte("x"), Key: "dropped"})
	waitFor(t, func() bool { return s.Total() == 1 })
	s.KickAll()
	select {
	case r := <-res:
		if !errors.Is(r.Err, ErrClosed) {
			t.Errorf("pending submit when the peer left: err = %v, want ErrClosed", r.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending submit not failed within 5s")
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err() = %v", c.Err())
	}
}

// fakePeer is the server end of a net.Pipe: tests script it frame by frame.
type fakePeer struct {
	t    *testing.T
	conn net.Conn
	in   chan []byte
}

func newFake(t *testing.T, o Options) (*Client, *fakePeer) {
	a, b := net.Pipe()
	c := NewClient(a, o)
	t.Cleanup(c.Close)
	p := &fakePeer{t: t, conn: b, in: make(chan []byte, 64)}
	go func() {
		defer close(p.in)
		for {
			f, err := smpp.ReadFrame(b, 0)
			if err != nil {
				return
			}
			p.in <- f
		}
	}()
	t.Cleanup(func() { _ = b.Close() })
	return c, p
}

func (p *fakePeer) send(f []byte) {
	p.t.Helper()
	if _, err := p.conn.Write(f); err != nil {
		p.t.Fatalf("fake peer write: %v", err)
	}
}

func (p *fakePeer) next() smpp.Header {
	p.t.Helper()
	select {
	case f, ok := <-p.in:
		if !ok {
			p.t.Fatal("fake peer: connection closed")
		}
		return smpp.ParseHeader(f)
	case <-time.After(5 * time.Second):
		p.t.Fatal("fake peer: nothing received within 5s")
	}
	return smpp.Header{}
}

func TestWindowBoundsOutstanding(t *testing.T) {
	c, p := newFake(t, Options{Window: 3})
	var done atomic.Int32
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			_, _ = c.Submit(context.Background(), Submit{Dst: "1", Key: fmt.Sprint(i)})
			done.Add(1)
		})
	}
	var seqs []uint32
	for range 3 {
		seqs = append(seqs, p.next().Sequence)
	}
	select {
	case f := <-p.in:
		t.Fatalf("a 4th submit (seq %d) was written with a window of 3", smpp.ParseHeader(f).Sequence)
	case <-time.After(100 * time.Millisecond):
	}
	p.send(smpp.SubmitResp(smpp.StatusOK, seqs[0], "m1"))
	seqs = append(seqs, p.next().Sequence) // the freed slot lets one more through
	for _, s := range seqs[1:] {
		p.send(smpp.SubmitResp(smpp.StatusOK, s, "m"))
	}
	p.send(smpp.SubmitResp(smpp.StatusOK, p.next().Sequence, "m"))
	wg.Wait()
	if done.Load() != 5 {
		t.Errorf("%d submits completed, want 5", done.Load())
	}
}

func TestAutoAnswers(t *testing.T) {
	c, p := newFake(t, Options{})
	p.send(smpp.EncodeSimple(smpp.CmdEnquireLink, 0, 10, nil))
	if h := p.next(); h.ID != smpp.CmdEnquireLink|smpp.RespBit || h.Sequence != 10 {
		t.Errorf("answer to enquire_link = %+v", h)
	}
	sub, _ := smpp.ParseSubmit(Submit{Src: "1", Dst: "2", Text: []byte("x")}.Frame(1))
	p.send(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 11, sim.ReceiptBody(sub, "abc", "UNDELIV")))
	if h := p.next(); h.ID != smpp.CmdDeliverSM|smpp.RespBit || h.Sequence != 11 || h.Status != smpp.StatusOK {
		t.Errorf("answer to deliver_sm = %+v", h)
	}
	if d := <-c.Receipts(); d.ReceiptedID != "abc" || d.Stat != "UNDELIV" || d.Seq != 11 {
		t.Errorf("receipt = %+v", d)
	}
	p.send(smpp.EncodeSimple(smpp.CmdDataSM, 0, 12, nil))
	if h := p.next(); h.ID != smpp.CmdGenericNack || h.Status != smpp.StatusInvCmdID || h.Sequence != 12 {
		t.Errorf("answer to data_sm = %+v", h)
	}
	p.send(smpp.EncodeSimple(smpp.CmdUnbind, 0, 13, nil))
	if h := p.next(); h.ID != smpp.CmdUnbind|smpp.RespBit || h.Sequence != 13 {
		t.Errorf("answer to unbind = %+v", h)
	}
	select {
	case <-c.Done():
		if !errors.Is(c.Err(), ErrUnbound) {
			t.Errorf("Err() after the peer's unbind = %v, want ErrUnbound", c.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client still open after the peer's unbind")
	}
}

func TestManualDeliverResp(t *testing.T) {
	c, p := newFake(t, Options{ManualDeliverResp: true, ReceiptBuffer: 1})
	sub, _ := smpp.ParseSubmit(Submit{Src: "1", Dst: "2"}.Frame(1))
	body := sim.ReceiptBody(sub, "id1", "DELIVRD")
	p.send(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 20, body))
	p.send(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 21, body)) // buffer full: refused
	if h := p.next(); h.Sequence != 21 || h.Status != smpp.StatusThrottled {
		t.Errorf("answer to a deliver_sm beyond the buffer = %+v, want ESME_RTHROTTLED", h)
	}
	d := <-c.Receipts()
	if err := c.AckDeliver(d.Seq, smpp.StatusOK); err != nil {
		t.Fatal(err)
	}
	if h := p.next(); h.Sequence != 20 || h.Status != smpp.StatusOK {
		t.Errorf("manual answer = %+v", h)
	}
	if got := c.Stats().Refused; got != 1 {
		t.Errorf("Stats().Refused = %d, want 1", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, cond, "condition not met")
}
