package smppserver

import (
	"github.com/smppproxy/smppproxy/internal/testkit"
	"log/slog"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
)

// Refused and malformed binds from one source address are logged once per
// interval (with a count of the lines held back), not once per bind: a
// guessing client cannot flood the log.
func TestRepeatedBindRefusalsFromOneSourceAreLoggedOnce(t *testing.T) {
	t.Parallel()
	var buf testkit.Buffer
	_, addr := startServer(t, nil, func(s *Server) { s.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	for i := 0; i < 4; i++ {
		c := dialESME(t, addr)
		if h, _ := c.bind(smpp.CmdBindTransceiver, "shop", "wrong"); h.Status != smpp.StatusBindFail {
			t.Fatalf("bind with a wrong password: status %v, want ESME_RBINDFAIL", h.Status.String())
		}
		c.expectClosed("after a refused bind")
	}
	c := dialESME(t, addr)
	seq := c.send(smpp.CmdBindTransceiver, []byte("no terminator"))
	c.expect("malformed bind", smpp.CmdBindTransceiver|smpp.RespBit, seq, smpp.StatusBindFail)
	c.expectClosed("after a malformed bind")

	lines := 0
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "bind refused") || strings.Contains(l, "malformed bind") {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("log lines for 5 refused binds from 127.0.0.1 = %d, want 1:\n%s", lines, buf.String())
	}
	if strings.Contains(buf.String(), "wrong") {
		t.Errorf("the password is in the log:\n%s", buf.String())
	}
}
