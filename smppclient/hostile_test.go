package smppclient

import (
	"net"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// An SMSC that answers a bind with a PDU gosmpp cannot decode (a query_sm
// with a TLV: gosmpp v0.3.1 panics on it) costs the proxy a failed bind,
// never the process.
func TestBindAnsweredWithAnUndecodablePDUFailsTheBindOnly(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Serve(t, ln, func(c net.Conn) {
		frame, err := smpp.ReadFrame(c, 0)
		if err != nil {
			return
		}
		body := []byte{'1', 0, 0, 0, 0, 0x14, 0x00, 0x00, 0x01, 'k'}
		_, _ = c.Write(smpp.EncodeSimple(smpp.CmdQuerySM, smpp.StatusOK, smpp.ParseHeader(frame).Sequence, body))
		_, _ = smpp.ReadFrame(c, 0) // until the client hangs up
	})
	p := newPool(t, ln.Addr().String(), nil)
	eventually(t, "a failed bind naming the undecodable PDU", func() bool {
		ss := p.Sessions()
		return len(ss) == 1 && ss[0].State != StateBound && strings.Contains(ss[0].LastError, "undecodable")
	})
}
