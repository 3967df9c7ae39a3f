package smppserver

import (
	"net"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

func TestUnknownCommandID(t *testing.T) {
	t.Parallel()
	binds := map[string]uint32{"unbound": 0} // 0: stay unbound
	for name, tt := range bindTypes {
		binds[name] = tt.cmd
	}
	_, addr := startServer(t, nil)
	for name, bind := range binds {
		t.Run(name, func(t *testing.T) {
			c := dialESME(t, addr)
			if bind != 0 {
				c.mustBind(bind, "shop")
			}
			for _, id := range []uint32{0x00000777, 0x00000000, 0x0000FFFF, 0x7FFFFFFF} {
				seq := c.send(id, []byte("whatever"))
				c.expect(name+": unknown command", smpp.CmdGenericNack, seq, smpp.StatusInvCmdID)
			}
			c.expectOpen(name + ": after unknown commands")
		})
	}
}

// A command_length out of bounds cannot be resynchronised: generic_nack
// ESME_RINVCMDLEN with the header's sequence number, then close. Other
// sessions are not affected.
func TestInvalidCommandLength(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		bound  bool
		length uint32
	}{
		"8 before bind":           {false, 8},
		"0 before bind":           {false, 0},
		"15 after bind":           {true, 15},
		"70000 before bind":       {false, 70000},
		"70000 after bind":        {true, 70000},
		"MaxPDUSize+1 after bind": {true, 65537},
		"0xFFFFFFFF after bind":   {true, 0xFFFFFFFF},
	}
	srv, addr := startServer(t, nil, func(s *Server) { s.MaxPDUSize = 65536 })

	bystander := dialBound(t, addr, smpp.CmdBindTransceiver)

	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := dialESME(t, addr)
			if tt.bound {
				c.mustBind(smpp.CmdBindTransceiver, "shop")
			}
			s := sessionOf(t, srv, c)
			hdr := make([]byte, smpp.HeaderLen)
			smpp.PutHeader(hdr, smpp.Header{Length: tt.length, ID: smpp.CmdSubmitSM, Sequence: 4242})
			c.write(hdr)
			c.expect(name, smpp.CmdGenericNack, 4242, smpp.StatusInvCmdLen)
			c.expectClosed(name + ": after generic_nack")
			if got := waitClosed(t, s); got != ReasonProtocolError {
				t.Errorf("%s: CloseReason() = %v, want %v", name, got, ReasonProtocolError)
			}
			bystander.submit(name+": bystander submit", smpp.StatusOK)
		})
	}

	// 65536 itself is allowed.
	c := dialBound(t, addr, smpp.CmdBindTransceiver)
	seq := c.nextSeq()
	c.write(smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, seq, make([]byte, 65536-smpp.HeaderLen)))
	c.expect("submit of exactly MaxPDUSize", smpp.CmdSubmitSM|smpp.RespBit, seq, smpp.StatusOK)
}

// A connection that ends inside a header (or a body) is just closed, with
// nothing sent; other sessions are not affected.
func TestTruncatedStreamIsJustClosed(t *testing.T) {
	t.Parallel()
	full := smpp.EncodeSimple(smpp.CmdSubmitSM, smpp.StatusOK, 7, submitBody("cut"))
	tests := map[string][]byte{
		"inside a header": full[:10],
		"inside a body":   full[:smpp.HeaderLen+5],
	}
	srv, addr := startServer(t, nil)
	bystander := dialBound(t, addr, smpp.CmdBindTransceiver)
	for name, partial := range tests {
		t.Run(name, func(t *testing.T) {
			c := dialBound(t, addr, smpp.CmdBindTransceiver)
			s := sessionOf(t, srv, c)
			c.write(partial)
			if err := c.conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatalf("CloseWrite: %v", err)
			}
			c.expectClosed(name)
			if got := waitClosed(t, s); got != ReasonClientClosed {
				t.Errorf("%s: CloseReason() = %v, want %v", name, got, ReasonClientClosed)
			}
			bystander.submit(name+": bystander submit", smpp.StatusOK)
		})
	}
}

func TestSubmitByBindType(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, nil)
	eachBindType(t, addr, func(t *testing.T, name string, tt bindType, c *esme) {
		c.mustBind(tt.cmd, "shop")
		c.submit("submit_sm on "+name, tt.submit)
		c.expectOpen(name + ": after submit")
	})
}
