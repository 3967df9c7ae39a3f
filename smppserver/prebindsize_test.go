package smppserver

import (
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// Before bind at most 1 KiB per PDU is read: a larger command_length gets
// generic_nack ESME_RINVCMDLEN and the connection is closed, whatever
// max_pdu_size says; 1 KiB itself is read and answered. After bind
// max_pdu_size applies.
func TestUnboundSessionReadsAtMostOneKiBPerPDU(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil, func(s *Server) { s.MaxPDUSize = 65536 })

	c := dialESME(t, addr)
	seq := c.nextSeq()
	c.write(smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, seq, make([]byte, 1024-smpp.HeaderLen)))
	c.expect("1024-byte submit_sm before bind", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusInvBndSts)
	c.mustBind(smpp.CmdBindTransceiver, "shop")
	seq = c.nextSeq()
	c.write(smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, seq, make([]byte, 4000)))
	c.expect("4016-byte submit_sm after bind", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusOK)

	for _, length := range []uint32{1025, 4016, 65536} {
		c := dialESME(t, addr)
		s := sessionOf(t, srv, c)
		hdr := make([]byte, smpp.HeaderLen)
		smpp.PutHeader(hdr, smpp.Header{Length: length, ID: smpp.CmdBindTransceiver, Sequence: 77})
		c.write(hdr)
		c.expect("command_length beyond 1 KiB before bind", smpp.CmdGenericNack, 77, smpp.StatusInvCmdLen)
		c.expectClosed("after generic_nack")
		if got := waitClosed(t, s); got != ReasonProtocolError {
			t.Errorf("length %d before bind: CloseReason() = %v, want %v", length, got, ReasonProtocolError)
		}
	}
}

// An idle connection that has not bound holds little memory: no read
// buffer of max_pdu_size, none of the bound session's buffers, and a PDU
// announced but not yet received costs what has arrived of it. Not
// parallel: it measures the process's heap.
func TestIdleUnboundConnectionsHoldLittleHeap(t *testing.T) {
	const (
		conns   = 200
		perConn = 12 << 10 // bytes of heap per idle unbound connection, client side included
	)
	srv, addr := startServer(t, nil)

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc

	clients := make([]net.Conn, 0, conns)
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.Close()
		}
	})
	ping := smpp.EncodeSimple(smpp.CmdEnquireLink, smpp.StatusOK, 1, nil)
	// A bind announced at the pre-bind maximum, of which only the start
	// has come.
	partial := make([]byte, smpp.HeaderLen+40)
	smpp.PutHeader(partial, smpp.Header{Length: 1024, ID: smpp.CmdBindTransceiver, Sequence: 2})
	var resp [smpp.HeaderLen]byte
	for i := 0; i < conns; i++ {
		c, err := net.DialTimeout("tcp", addr, ioTimeout)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		clients = append(clients, c)
		// The answered enquire_link shows that the session's reader and
		// writer are running.
		if _, err := c.Write(ping); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := io.ReadFull(c, resp[:]); err != nil {
			t.Fatalf("enquire_link_resp on connection %d: %v", i, err)
		}
		if _, err := c.Write(partial); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if n := len(srv.Sessions()); n != conns {
		t.Fatalf("live sessions = %d, want %d", n, conns)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	delta := int64(ms.HeapAlloc) - int64(before)
	t.Logf("heap per idle unbound connection: %d bytes", delta/conns)
	if per := delta / conns; per > perConn {
		t.Errorf("heap per idle unbound connection = %d bytes (%d connections, %d bytes), want at most %d", per, conns, delta, perConn)
	}
	runtime.KeepAlive(clients)
}
