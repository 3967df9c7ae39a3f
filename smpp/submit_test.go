package smpp_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
)

func TestParseSubmitRoundTripsAndStripsOnlyTheKeyTLV(t *testing.T) {
	f := smpptest.SubmitFields{Src: "ACME", Dst: "447700900001", DataCoding: 0xF5, ShortMessage: []byte{0x00, 0xFF, 0x10},
		TLVs: []smpp.TLV{{Tag: 0x1400, Value: []byte("key-1\x00")}, {Tag: 0x0204, Value: []byte{0, 7}}}}
	frame := smpptest.EncodeSubmit(42, f)
	s, err := smpp.ParseSubmit(frame)
	if err != nil {
		t.Fatalf("ParseSubmit = %v", err)
	}
	if string(s.DstAddr) != f.Dst || s.DataCoding != 0xF5 || !bytes.Equal(s.ShortMessage, f.ShortMessage) {
		t.Fatalf("ParseSubmit fields = dst %q dc %#x sm %x, want %q %#x %x", s.DstAddr, s.DataCoding, s.ShortMessage, f.Dst, 0xF5, f.ShortMessage)
	}
	if got := s.Frame(42); !bytes.Equal(got, frame) {
		t.Fatalf("Frame(42) is not byte-identical to the input:\n got %x\nwant %x", got, frame)
	}
	out := s.Frame(7, 0x1400)
	o, err := smpp.ParseSubmit(out)
	if err != nil {
		t.Fatalf("ParseSubmit(stripped) = %v", err)
	}
	if _, ok := o.TLV(0x1400); ok {
		t.Errorf("stripped frame still carries the key TLV")
	}
	if v, ok := o.TLV(0x0204); !ok || !bytes.Equal(v, []byte{0, 7}) {
		t.Errorf("stripped frame lost TLV 0x0204: %x %v", v, ok)
	}
	if o.Header.Sequence != 7 || int(o.Header.Length) != len(out) {
		t.Errorf("stripped header = %+v (len %d), want seq 7 and matching length", o.Header, len(out))
	}
}

func TestSegmentIdentity(t *testing.T) {
	udh8 := []byte{0x05, 0x00, 0x03, 0x2A, 0x03, 0x02, 'h', 'i'}
	udh16 := []byte{0x06, 0x08, 0x04, 0x01, 0x02, 0x04, 0x03, 'h'}
	tests := map[string]struct {
		f    smpptest.SubmitFields
		want string
	}{
		"plain":      {smpptest.SubmitFields{ShortMessage: []byte("hello")}, ""},
		"udh 8-bit":  {smpptest.SubmitFields{EsmClass: 0x40, ShortMessage: udh8}, "2/3"},
		"udh 16-bit": {smpptest.SubmitFields{EsmClass: 0x40, ShortMessage: udh16}, "3/4"},
		"udhi unset": {smpptest.SubmitFields{ShortMessage: udh8}, ""},
		"sar tlvs":   {smpptest.SubmitFields{ShortMessage: []byte("x"), TLVs: []smpp.TLV{{0x020C, []byte{0, 9}}, {0x020E, []byte{5}}, {0x020F, []byte{4}}}}, "4/5"},
		"broken udh": {smpptest.SubmitFields{EsmClass: 0x40, ShortMessage: []byte{0x09, 0x00}}, ""},
	}
	for name, tc := range tests {
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, tc.f))
		if err != nil {
			t.Fatalf("%s: ParseSubmit = %v", name, err)
		}
		if got := s.Segment().String(); got != tc.want {
			t.Errorf("%s: Segment() = %q, want %q", name, got, tc.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	base := smpptest.SubmitFields{Src: "A", Dst: "4477", ShortMessage: []byte("code 1234"), TLVs: []smpp.TLV{{0x1400, []byte("k")}}}
	fp := func(f smpptest.SubmitFields, seq uint32) [32]byte {
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(seq, f))
		if err != nil {
			t.Fatal(err)
		}
		return s.Fingerprint()
	}
	ref := fp(base, 1)
	same := base
	same.Validity, same.Schedule = "000001000000000R", "000000000100000R"
	same.TLVs = []smpp.TLV{{0x1400, []byte("other-key")}}
	if fp(same, 99) != ref {
		t.Errorf("fingerprint changed with sequence, validity, schedule or key TLV; it must not")
	}
	diff := base
	diff.ShortMessage = []byte("code 9999")
	if fp(diff, 1) == ref {
		t.Errorf("fingerprint equal for different text")
	}
	dst := base
	dst.Dst = "4478"
	if fp(dst, 1) == ref {
		t.Errorf("fingerprint equal for different destination")
	}
	// A renewed concatenation reference is not a different message.
	a := smpptest.SubmitFields{EsmClass: 0x40, ShortMessage: []byte{0x05, 0x00, 0x03, 0x01, 0x02, 0x01, 'x'}}
	b := a
	b.ShortMessage = []byte{0x05, 0x00, 0x03, 0x77, 0x02, 0x01, 'x'}
	if fp(a, 1) != fp(b, 1) {
		t.Errorf("fingerprint differs only by concatenation reference; it must not")
	}
}

func TestParseSubmitRefusesMalformedBodies(t *testing.T) {
	good := smpptest.EncodeSubmit(1, smpptest.SubmitFields{Dst: "1", ShortMessage: []byte("abc"), TLVs: []smpp.TLV{{0x1400, []byte("k")}}})
	tests := map[string]struct {
		frame []byte
		want  smpp.Status
	}{
		"truncated mandatory": {good[:smpp.HeaderLen+3], smpp.StatusInvCmdLen},
		"sm_length past body": {smPastBody(), smpp.StatusInvMsgLen},
		"broken tlv":          {append(append([]byte{}, good...), 0x14, 0x00, 0x00), smpp.StatusInvOptParStream},
	}
	for name, tc := range tests {
		_, err := smpp.ParseSubmit(tc.frame)
		var fe *smpp.FieldError
		if !errors.As(err, &fe) || fe.Status != tc.want {
			t.Errorf("%s: ParseSubmit error = %v, want status %v", name, err, tc.want)
		}
	}
}

// smPastBody is a submit whose sm_length says 3 but carries 1 octet.
func smPastBody() []byte {
	b := smpptest.EncodeSubmit(1, smpptest.SubmitFields{Dst: "1", ShortMessage: []byte("abc")})
	b = b[:len(b)-2]
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdSubmitSM, Sequence: 1})
	return b
}

func FuzzParseSubmit(f *testing.F) {
	f.Add(smpptest.EncodeSubmit(1, smpptest.SubmitFields{Src: "a", Dst: "b", ShortMessage: []byte("hello"), TLVs: []smpp.TLV{{0x1400, []byte("k")}}}))
	f.Add(smpptest.EncodeSubmit(2, smpptest.SubmitFields{EsmClass: 0x40, ShortMessage: []byte{0x05, 0x00, 0x03, 0x01, 0x02, 0x01, 'x'}}))
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := smpp.ParseSubmit(b)
		if err != nil {
			return
		}
		_ = s.Segment()
		_ = s.Fingerprint()
		out := s.Frame(5, 0x1400)
		if _, err := smpp.ParseSubmit(out); err != nil {
			t.Fatalf("re-encoded frame does not parse: %v", err)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 0x15, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 0x15})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 20, 0, 0, 0, 0x15, 0, 0, 0, 0, 0, 0, 0, 1, 'a'})
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := smpp.ReadFrame(bytes.NewReader(b), 1024)
		// The buffered path (bound sessions, clients) must read exactly
		// what the plain one reads, and fail the same way.
		bframe, berr := smpp.ReadFrame(bufio.NewReaderSize(bytes.NewReader(b), 16), 1024)
		if !bytes.Equal(frame, bframe) || (err == nil) != (berr == nil) || !sameReadError(err, berr) {
			t.Fatalf("ReadFrame = %x, %v; from a bufio.Reader %x, %v", frame, err, bframe, berr)
		}
		if err != nil {
			return
		}
		if len(frame) < smpp.HeaderLen || len(frame) > 1024 || int(smpp.ParseHeader(frame).Length) != len(frame) {
			t.Fatalf("ReadFrame returned a frame of %d bytes with header length %d", len(frame), smpp.ParseHeader(frame).Length)
		}
		_, _ = smpp.Decode(frame)
	})
}

func TestKnownMatchesGosmpp(t *testing.T) {
	for _, id := range []uint32{smpp.CmdSubmitSM, smpp.CmdBindTransceiver, smpp.CmdEnquireLink, smpp.CmdDataSM, smpp.CmdGenericNack, smpp.CmdSubmitSM | smpp.RespBit, smpp.CmdAlertNotif} {
		if !smpp.Known(id) {
			t.Errorf("Known(0x%08X) = false, want true", id)
		}
	}
	for _, id := range []uint32{0, 0x777, 0x7FFFFFFF, 0x00000400, 0x80000777} {
		if smpp.Known(id) {
			t.Errorf("Known(0x%08X) = true, want false", id)
		}
	}
}

// sameReadError reports whether two ReadFrame errors are the same kind.
func sameReadError(a, b error) bool {
	var la, lb *smpp.LengthError
	switch {
	case errors.As(a, &la):
		return errors.As(b, &lb) && la.Header == lb.Header
	case errors.Is(a, io.ErrUnexpectedEOF):
		return errors.Is(b, io.ErrUnexpectedEOF)
	case errors.Is(a, io.EOF):
		return errors.Is(b, io.EOF) && !errors.Is(b, io.ErrUnexpectedEOF)
	}
	return (a == nil) == (b == nil)
}

// FrameBuffered is true exactly when ReadFrame needs no read from the
// connection: a whole frame, or a header ReadFrame refuses, is buffered.
func TestFrameBufferedWhenReadFrameNeedsNoRead(t *testing.T) {
	frame := smpp.EncodeSimple(smpp.CmdEnquireLink, smpp.StatusOK, 1, []byte("abcd"))
	bad := []byte{0, 0, 0, 8, 0, 0, 0, 0x15, 0, 0, 0, 0, 0, 0, 0, 1}
	for _, tt := range []struct {
		name     string
		buffered []byte
		want     bool
	}{
		{"nothing", nil, false},
		{"part of a header", frame[:10], false},
		{"a header only", frame[:smpp.HeaderLen], false},
		{"all but a byte", frame[:len(frame)-1], false},
		{"a whole frame", frame, true},
		{"a frame and part of the next", append(append([]byte{}, frame...), frame[:3]...), true},
		{"a refused length", bad, true},
	} {
		// The reader holds exactly the bytes given and would block (fail)
		// on the next read.
		br := bufio.NewReader(io.MultiReader(bytes.NewReader(tt.buffered), failingReader{}))
		if len(tt.buffered) > 0 {
			_, _ = br.Peek(len(tt.buffered))
		}
		if got := smpp.FrameBuffered(br); got != tt.want {
			t.Errorf("%s: FrameBuffered = %v, want %v", tt.name, got, tt.want)
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("would block") }

// A request's command_status is 0 in the frame sent upstream, whatever the
// ESME's header carried: a strict SMSC answers a request with a status
// generic_nack, a permanent error stored and replayed to every retry (from
// review: the ESME's status was copied).
func TestTheFrameSentUpstreamCarriesCommandStatusZero(t *testing.T) {
	frame := smpptest.EncodeSubmit(3, smpptest.SubmitFields{Src: "ACME", Dst: "447700900001", ShortMessage: []byte("hi")})
	frame[11] = 0x45 // command_status 0x00000045
	s, err := smpp.ParseSubmit(frame)
	if err != nil {
		t.Fatalf("ParseSubmit = %v", err)
	}
	if h := smpp.ParseHeader(s.Frame(9, 0x1400)); h.Status != 0 {
		t.Errorf("command_status of the frame sent upstream = %#x, want 0", uint32(h.Status))
	}
}
