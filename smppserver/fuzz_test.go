package smppserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// FuzzReadPath feeds arbitrary bytes to a real session as the client's
// stream, then ends the stream. Whatever the bytes, the server must not
// panic, must only write whole, well-formed frames, and the session must end
// by itself once the stream has ended.
func FuzzReadPath(f *testing.F) {
	frame := func(id uint32, seq uint32, body []byte) []byte {
		return smpp.EncodeSimple(id, smpp.StatusOK, seq, body)
	}
	cat := func(frames ...[]byte) []byte {
		var b []byte
		for _, fr := range frames {
			b = append(b, fr...)
		}
		return b
	}
	bind := frame(smpp.CmdBindTransceiver, 1, bindBody("shop", password))
	submit := frame(smpp.CmdSubmitSM, 2, submitBody("hello"))
	hdr := func(length uint32) []byte {
		b := make([]byte, smpp.HeaderLen)
		smpp.PutHeader(b, smpp.Header{Length: length, ID: smpp.CmdSubmitSM, Sequence: 3})
		return b
	}
	seeds := [][]byte{
		cat(bind, submit),
		cat(bind, submit, submit, frame(smpp.CmdEnquireLink, 4, nil), frame(smpp.CmdUnbind, 5, nil)),
		cat(frame(smpp.CmdBindReceiver, 1, bindBody("shop", password)), submit),
		cat(bind, bind, frame(0x777, 9, []byte("x"))),
		cat(bind, frame(smpp.CmdDeliverSM|smpp.RespBit, 1, []byte{0}), frame(smpp.CmdGenericNack, 1, nil)),
		cat(frame(smpp.CmdBindTransceiver, 1, []byte("no terminators")), submit),
		cat(frame(smpp.CmdBindTransmitter, 1, bindBody("shop", "wrong"))),
		submit,
		bind[:10],
		cat(bind, submit[:7]),
		cat(bind, submit[:smpp.HeaderLen+3]),
		hdr(0xFFFFFFFF),
		cat(bind, hdr(70000)),
		hdr(8),
		hdr(0),
		{},
	}
	for _, s := range seeds {
		f.Add(s)
	}

	srv := &Server{
		Handler:      okHandler,
		Auth:         AuthFunc(testAuth),
		BindTimeout:  ioTimeout,
		EnquireLink:  time.Minute,
		WriteTimeout: ioTimeout,
		MaxPDUSize:   4096,
		Window:       4,
	}
	addr := RunLocalServer(f, srv)

	f.Fuzz(func(t *testing.T, in []byte) {
		conn, err := net.DialTimeout("tcp", addr, ioTimeout)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		go func() {
			_ = conn.SetWriteDeadline(time.Now().Add(ioTimeout))
			_, _ = conn.Write(in) // fails when the server closed first; fine
			_ = conn.(*net.TCPConn).CloseWrite()
		}()
		_ = conn.SetReadDeadline(time.Now().Add(2 * ioTimeout))
		r := bufio.NewReader(conn)
		for {
			out, err := smpp.ReadFrame(r, smpp.DefaultMaxPDUSize)
			if err == nil {
				h := smpp.ParseHeader(out)
				if !h.IsResponse() && h.ID != smpp.CmdEnquireLink && h.ID != smpp.CmdUnbind {
					t.Fatalf("server wrote %s, want only responses, enquire_link or unbind", fmtHeader(h))
				}
				continue
			}
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
				// The server closed the connection: the session ended.
			case errors.Is(err, os.ErrDeadlineExceeded):
				t.Fatalf("session did not end after the client's stream ended")
			default:
				t.Fatalf("reading the server's frames: %v (a partial or malformed frame)", err)
			}
			return
		}
	})
}
