package smppserver

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/smppproxy/smppproxy/internal/testkit"

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

// A PDU whose command_length closes the session is logged once per source
// address per interval too: any client, bound or not, can send one per
// connection (from review: 200 connections sending 16 zero bytes gave 200
// warnings).
func TestRepeatedInvalidCommandLengthsFromOneSourceAreLoggedOnce(t *testing.T) {
	t.Parallel()
	var buf testkit.Buffer
	_, addr := startServer(t, nil, func(s *Server) { s.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	for range 5 {
		c := dialESME(t, addr)
		c.write(make([]byte, smpp.HeaderLen))
		c.expect("a command_length of 0", smpp.CmdGenericNack, 0, smpp.StatusInvCmdLen)
		c.expectClosed("after generic_nack")
	}
	lines := strings.Count(buf.String(), "invalid command_length")
	if lines != 1 {
		t.Errorf("log lines for 5 invalid command_lengths from 127.0.0.1 = %d, want 1:\n%s", lines, buf.String())
	}
}

// After a refused bind nothing more is read: a bind pipelined behind it is
// not authenticated (from review: each connection cost two password
// checks, and counted twice against the back-off).
func TestABindPipelinedBehindARefusedOneIsNotChecked(t *testing.T) {
	t.Parallel()
	var checks atomic.Int32
	_, addr := startServer(t, nil, func(s *Server) {
		s.Auth = AuthFunc(func(ctx context.Context, r BindRequest) (*Principal, smpp.Status) {
			checks.Add(1)
			return testAuth(ctx, r)
		})
	})
	c := dialESME(t, addr)
	var frames []byte
	for seq := uint32(1); seq <= 10; seq++ {
		frames = append(frames, smpp.EncodeSimple(smpp.CmdBindTransceiver, smpp.StatusOK, seq, bindBody("shop", "wrong"))...)
	}
	c.write(frames)
	c.expect("the first bind", smpp.CmdBindTransceiver|smpp.RespBit, 1, smpp.StatusBindFail)
	c.expectClosed("after the refused bind")
	if n := checks.Load(); n != 1 {
		t.Errorf("binds authenticated = %d, want 1", n)
	}
}
