package smppserver

import (
	"context"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// A client that unbinds and hangs up at once (many do, without waiting
// for the unbind_resp) ended its session by unbinding, not by going away:
// the close is counted and logged as unbind.
func TestUnbindFollowedByAnImmediateHangUpClosesAsUnbind(t *testing.T) {
	t.Parallel()
	_, rec, addr := runRecorded(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	if ev := rec.next(t); !ev.up {
		t.Fatalf("first hook call = %+v, want OnBound", ev)
	}
	c.write(smpp.EncodeSimple(smpp.CmdUnbind, 0, c.nextSeq(), nil))
	_ = c.conn.Close()
	if ev := rec.next(t); ev.up || ev.reason != ReasonUnbind {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonUnbind)
	}
}

// At shutdown the server unbinds a session; a client that answers and hangs
// up at once was closed by the shutdown, not by itself.
func TestShutdownUnbindAnsweredWithAHangUpClosesAsServerShutdown(t *testing.T) {
	t.Parallel()
	srv, rec, addr := runRecorded(t)
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	if ev := rec.next(t); !ev.up {
		t.Fatalf("first hook call = %+v, want OnBound", ev)
	}
	go func() { _ = srv.Shutdown(context.Background()) }()
	h, _, err := c.tryRead(ioTimeout)
	if err != nil || h.ID != smpp.CmdUnbind {
		t.Fatalf("after Shutdown got %s, %v; want an unbind", fmtHeader(h), err)
	}
	c.write(smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil))
	_ = c.conn.Close()
	if ev := rec.next(t); ev.up || ev.reason != ReasonServerShutdown {
		t.Errorf("hook call = %+v, want OnClosed with %v", ev, ReasonServerShutdown)
	}
}
