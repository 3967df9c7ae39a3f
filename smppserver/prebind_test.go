package smppserver

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Before bind, enquire_link is answered normally; every other request gets
// its own *_resp with ESME_RINVBNDSTS (generic_nack when it has none); an
// unknown command gets ESME_RINVCMDID. None of it closes the connection.
func TestBeforeBind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cmd    uint32
		body   []byte
		resp   uint32
		status smpp.Status
	}{
		{"enquire_link", smpp.CmdEnquireLink, nil, smpp.CmdEnquireLink | smpp.RespBit, smpp.StatusOK},
		{"submit_sm", smpp.CmdSubmitSM, submitBody("early"), smpp.CmdSubmitSM | smpp.RespBit, smpp.StatusInvBndSts},
		{"query_sm", smpp.CmdQuerySM, []byte("abc\x00\x01\x01447700\x00"), smpp.CmdQuerySM | smpp.RespBit, smpp.StatusInvBndSts},
		{"cancel_sm", smpp.CmdCancelSM, []byte("\x00abc\x00\x01\x01447700\x00\x01\x01447701\x00"), smpp.CmdCancelSM | smpp.RespBit, smpp.StatusInvBndSts},
		{"data_sm", smpp.CmdDataSM, nil, smpp.CmdDataSM | smpp.RespBit, smpp.StatusInvBndSts},
		{"unbind", smpp.CmdUnbind, nil, smpp.CmdUnbind | smpp.RespBit, smpp.StatusInvBndSts},
		{"alert_notification", smpp.CmdAlertNotif, []byte("\x01\x01447700\x00\x01\x01447701\x00"), smpp.CmdGenericNack, smpp.StatusInvBndSts},
		{"outbind", smpp.CmdOutbind, []byte("smsc\x00pw\x00"), smpp.CmdGenericNack, smpp.StatusInvBndSts},
		{"unknown command", 0x00000777, nil, smpp.CmdGenericNack, smpp.StatusInvCmdID},
	}
	srv, addr := startServer(t, nil)
	c := dialESME(t, addr)
	for _, tt := range tests {
		seq := c.send(tt.cmd, tt.body)
		h, _ := c.read()
		if h.ID != tt.resp || h.Sequence != seq || h.Status != tt.status {
			t.Errorf("%s before bind: got %s, want %s", tt.name, fmtHeader(h), fmtHeader(smpp.Header{ID: tt.resp, Sequence: seq, Status: tt.status}))
		}
	}
	if got := sessionOf(t, srv, c).Requests(); got != 0 {
		t.Errorf("Requests() before bind = %d, want 0 (nothing reaches the handler)", got)
	}
	c.mustBind(smpp.CmdBindTransceiver, "shop")
	c.submit("submit after the refused ones", smpp.StatusOK)
}

// The bind timeout counts from connect: traffic before bind, however
// steady, does not extend it.
func TestBindTimeoutCountsFromConnect(t *testing.T) {
	t.Parallel()
	const bindTimeout = 300 * time.Millisecond
	srv, addr := startServer(t, nil, func(s *Server) { s.BindTimeout = bindTimeout })

	start := time.Now()
	c := dialESME(t, addr)
	s := sessionOf(t, srv, c)
	for {
		seq := c.send(smpp.CmdEnquireLink, nil)
		h, _, err := c.tryRead(ioTimeout)
		if err != nil {
			if !isClosedErr(err) {
				t.Fatalf("read: %v, want an enquire_link_resp or the connection closed", err)
			}
			break
		}
		if h.ID != smpp.CmdEnquireLink|smpp.RespBit || h.Sequence != seq || h.Status != smpp.StatusOK {
			t.Fatalf("enquire_link before bind: got %s, want a status 0 response to sequence %d", fmtHeader(h), seq)
		}
		if time.Since(start) > ioTimeout {
			t.Fatalf("unbound session sending enquire_link every 20ms still open after %v, want it closed at %v", ioTimeout, bindTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if elapsed := time.Since(start); elapsed < bindTimeout-10*time.Millisecond {
		t.Errorf("unbound session closed after %v, want %v from connect", elapsed, bindTimeout)
	}
	if got := waitClosed(t, s); got != ReasonBindTimeout {
		t.Errorf("CloseReason() = %v, want %v", got, ReasonBindTimeout)
	}
}
