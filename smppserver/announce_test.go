package smppserver

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// A request the server sends from OnBound — the receipt service
// delivering a queued receipt at once — never overtakes the bind_resp, and
// the session is not listed by ReceiversOf before its bind_resp is queued.
func TestBindRespGoesBeforeAnythingSentOnBind(t *testing.T) {
	srv := newTestServer(nil)
	sawUnannounced := make(chan bool, 1)
	srv.OnBound = func(s *Session) {
		sawUnannounced <- len(srv.ReceiversOf(s.Account())) == 0
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = s.Request(ctx, smpp.CmdDeliverSM, nil)
		}()
	}
	addr := RunLocalServer(t, srv)
	for i := range 20 {
		c := dialESME(t, addr)
		seq := c.send(smpp.CmdBindReceiver, bindBody("shop", password))
		h, _ := c.read()
		if h.ID != smpp.CmdBindReceiver|smpp.RespBit || h.Sequence != seq {
			t.Fatalf("bind %d: first frame %s, want the bind_receiver_resp", i, fmtHeader(h))
		}
		if h2, _ := c.read(); h2.ID != smpp.CmdDeliverSM {
			t.Fatalf("bind %d: second frame %s, want the deliver_sm", i, fmtHeader(h2))
		}
		if <-sawUnannounced {
			t.Fatalf("bind %d: ReceiversOf did not list the session when OnBound ran", i)
		}
	}
}
