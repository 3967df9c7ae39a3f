package smppserver

// A frame larger than the write buffer is written after an idle spell. The
// bug this guards against: writeLoop set the write deadline only just before
// Flush, after the frames were handed to the bufio.Writer. A frame larger
// than the free buffer (16 KiB) is written to the socket by bufio itself,
// under the deadline of the previous flush, which has passed whenever the
// link was quiet for longer than WriteTimeout (10 s by default; enquire_link
// is 30 s, so most idle gaps). The write fails at once with an i/o
// timeout and the session is closed (write_error). A deliver_sm over
// 16 KiB (MO with message_payload, max_pdu_size 64 KiB) therefore kills
// every session it is delivered on, and being redelivered on the next bind
// it does so forever; a burst of queued frames over 16 KiB after a quiet
// spell drops the session too, losing the responses in it.

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

func TestFrameLargerThanTheWriteBufferIsWrittenAfterAnIdleSpell(t *testing.T) {
	srv := &Server{
		Handler: HandlerFunc(func(_ context.Context, w ResponseWriter, _ *Request) { _ = w.WriteStatus(smpp.StatusOK) }),
		Auth: AuthFunc(func(context.Context, BindRequest) (*Principal, smpp.Status) {
			return &Principal{Account: "shop"}, smpp.StatusOK
		}),
		BindTimeout:  2 * time.Second,
		EnquireLink:  time.Minute,
		WriteTimeout: 100 * time.Millisecond,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	c, err := net.DialTimeout("tcp", l.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	bind := []byte("shop\x00pw\x00\x00\x34\x00\x00\x00")
	if _, err := c.Write(smpp.EncodeSimple(smpp.CmdBindTransceiver, smpp.StatusOK, 1, bind)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if f, err := smpp.ReadFrame(r, 0); err != nil || smpp.ParseHeader(f).Status != smpp.StatusOK {
		t.Fatalf("bind_resp: %v", err)
	}
	var s *Session
	for deadline := time.Now().Add(2 * time.Second); s == nil && time.Now().Before(deadline); {
		if ss := srv.Sessions(); len(ss) == 1 && ss[0].BindType() != smpp.BindNone {
			s = ss[0]
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if s == nil {
		t.Fatal("session not bound")
	}

	time.Sleep(300 * time.Millisecond) // quiet for longer than WriteTimeout

	body := make([]byte, 20<<10) // a 20 KiB deliver_sm body
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.Request(ctx, smpp.CmdDeliverSM, body)
		got <- err
	}()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	f, err := smpp.ReadFrame(r, 1<<20)
	if err != nil {
		t.Fatalf("reading the 20 KiB deliver_sm: %v (session closed: %v)", err, s.CloseReason())
	}
	h := smpp.ParseHeader(f)
	if _, err := c.Write(smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, smpp.StatusOK, h.Sequence, []byte{0})); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("Request: %v", err)
	}
}
