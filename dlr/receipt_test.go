package dlr

import (
	"bytes"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

// The receipt text of SMPP 3.4 Appendix B is read as SMSCs write it: keys
// in any case, with underscores or spaces, the first id winning, nothing
// after text:, a key only at the start of a word.
func TestParseReceiptText(t *testing.T) {
	tests := map[string]struct {
		text   string
		want   ReceiptText
		wantOK bool
	}{
		"standard": {
			text:   "id:1234567890 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:Hello id:999",
			want:   ReceiptText{ID: "1234567890", Sub: "001", Dlvrd: "001", SubmitDate: "2503141509", DoneDate: "2503141510", Stat: "DELIVRD", Err: "000"},
			wantOK: true,
		},
		"upper case keys, underscores": {
			text:   "ID:abc SUB:1 DLVRD:1 SUBMIT_DATE:250314150901 DONE_DATE:250314151001 STAT:UNDELIV ERR:012",
			want:   ReceiptText{ID: "abc", Sub: "1", Dlvrd: "1", SubmitDate: "250314150901", DoneDate: "250314151001", Stat: "UNDELIV", Err: "012"},
			wantOK: true,
		},
		"first id wins": {
			text:   "id:1 id:2 stat:ENROUTE",
			want:   ReceiptText{ID: "1", Stat: "ENROUTE"},
			wantOK: true,
		},
		"text stops parsing": {
			text: "text:id:7 stat:DELIVRD",
			want: ReceiptText{},
		},
		"keys only at word starts": {
			text:   "xid:5 stat:DELIVRD",
			want:   ReceiptText{Stat: "DELIVRD"},
			wantOK: true,
		},
		"stat only": {
			text:   "stat:EXPIRED",
			want:   ReceiptText{Stat: "EXPIRED"},
			wantOK: true,
		},
		"not a receipt": {text: "Your code is 123456"},
		"empty id":      {text: "id: 5", want: ReceiptText{}},
	}
	for name, tc := range tests {
		got, ok := ParseReceiptText([]byte(tc.text))
		got.idOff, tc.want.idOff = 0, 0
		got.textOff, tc.want.textOff = 0, 0
		got.firstOff, tc.want.firstOff = 0, 0
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: ParseReceiptText(%q) = %+v, %v; want %+v, %v", name, tc.text, got, ok, tc.want, tc.wantOK)
		}
	}
}

// The text: field carries the start of the original message — often the
// OTP — and is dropped before anything is stored or delivered.
func TestTheMessageAfterTextIsCut(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"standard": {"id:1 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:Your code is 918273",
			"id:1 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:"},
		"no text field": {"id:1 stat:DELIVRD err:000", "id:1 stat:DELIVRD err:000"},
		"empty text":    {"id:1 stat:DELIVRD text:", "id:1 stat:DELIVRD text:"},
		"upper case":    {"id:1 stat:DELIVRD TEXT:918273", "id:1 stat:DELIVRD TEXT:"},
	}
	for name, tc := range tests {
		_, _, cut := readText(&message{}, []byte(tc.in))
		if got := tc.in[:cut]; got != tc.want {
			t.Errorf("%s: %q cut to %q, want %q", name, tc.in, got, tc.want)
		}
	}
}

func TestOnlyTheIDIsRewritten(t *testing.T) {
	text := []byte("id:3E8 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:id:3E8")
	r, _ := ParseReceiptText(text)
	got := textLayout{}.rewriteID(text, r, "proxy-0001")
	want := "id:proxy-0001 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:id:3E8"
	if string(got) != want {
		t.Errorf("rewriteID = %q, want %q", got, want)
	}
	noID, _ := ParseReceiptText([]byte("stat:DELIVRD"))
	if got := (textLayout{}).rewriteID([]byte("stat:DELIVRD"), noID, "x"); string(got) != "stat:DELIVRD" {
		t.Errorf("rewriteID without an id field = %q, want the text unchanged", got)
	}
}

func TestSubmitTime(t *testing.T) {
	r, _ := ParseReceiptText([]byte("id:1 submit date:2503141509 stat:DELIVRD"))
	got, ok := r.SubmitTime(time.UTC)
	if want := time.Date(2025, 3, 14, 15, 9, 0, 0, time.UTC); !ok || !got.Equal(want) {
		t.Errorf("SubmitTime = %v, %v; want %v", got, ok, want)
	}
}

func TestReadAndRewriteReceipt(t *testing.T) {
	text := "id:1000 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:"
	frame := receiptFrame(text, smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("3e8\x00")}, smpp.TLV{Tag: smpp.TagMessageState, Value: []byte{2}})
	m, err := parseMessage(frame)
	if err != nil {
		t.Fatal(err)
	}
	if !m.isReceipt() || !bytes.Equal(m.body(), frame[smpp.HeaderLen:]) {
		t.Fatalf("parseMessage: receipt %v, body round trip %v; want true, true", m.isReceipt(), bytes.Equal(m.body(), frame[smpp.HeaderLen:]))
	}
	r := readReceipt(m)
	if r.id != "3e8" || !r.tlvID || r.state != state.DeliveryDelivered || r.stat != "DELIVRD" {
		t.Errorf("readReceipt = id %q (tlv %v) state %q stat %q; want 3e8 from the TLV, delivered, DELIVRD", r.id, r.tlvID, r.state, r.stat)
	}
	same := r.rewrite("3e8")
	// The TLV already says 3e8 but the text says 1000: only the text changes.
	m2, _ := parseMessage(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 1, same))
	if got := string(m2.sm); got[:8] != "id:3e8 s" {
		t.Errorf("rewritten text = %q, want the id 3e8", got)
	}

	m, _ = parseMessage(frame)
	r = readReceipt(m)
	out := r.rewrite("P-77")
	m3, _ := parseMessage(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 1, out))
	if v, _ := m3.tlv(smpp.TagReceiptedMessageID); string(v) != "P-77\x00" {
		t.Errorf("receipted_message_id = %q, want P-77 with its NUL", v)
	}
	if got := readReceipt(m3); got.text.ID != "P-77" || got.stat != "DELIVRD" || got.text.SubmitDate != "2503141509" {
		t.Errorf("rewritten receipt = %+v; want id P-77 and every other field unchanged", got.text)
	}
	if !bytes.Equal(m3.head, m.head) || m3.srcTON != m.srcTON || !bytes.Equal(m3.src, m.src) {
		t.Errorf("rewriting changed the mandatory fields")
	}

	// Passthrough: ids already right, body byte for byte.
	plain := receiptFrame("id:42 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("42")})
	m, _ = parseMessage(plain)
	if out := readReceipt(m).rewrite("42"); !bytes.Equal(out, plain[smpp.HeaderLen:]) {
		t.Errorf("rewrite to the same id changed the body:\n%x\n%x", out, plain[smpp.HeaderLen:])
	}
}

func TestIntermediateAndMessageStates(t *testing.T) {
	tests := []struct {
		esm   byte
		text  string
		tlvs  []smpp.TLV
		state state.DeliveryState
	}{
		{0x04, "id:1 stat:UNDELIV", nil, state.DeliveryUndeliverable},
		{0x04, "id:1 stat:delivrd", nil, state.DeliveryDelivered},
		{0x04, "id:1 stat:DELIVRD", []smpp.TLV{{Tag: smpp.TagMessageState, Value: []byte{3}}}, state.DeliveryExpired},
		{0x20, "id:1", nil, state.DeliveryEnroute},
		{0x04, "id:1 stat:WEIRD", nil, ""},
	}
	for _, tc := range tests {
		f := smpptest.SubmitFields{Src: "1", Dst: "2", EsmClass: tc.esm, ShortMessage: []byte(tc.text), TLVs: tc.tlvs}
		b := smpptest.EncodeSubmit(1, f)
		smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 1})
		m, err := parseMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := readReceipt(m).state; got != tc.state {
			t.Errorf("receipt esm 0x%02x %q %v: state %q, want %q", tc.esm, tc.text, tc.tlvs, got, tc.state)
		}
	}
}

func TestParseDataSM(t *testing.T) {
	body := []byte{0, 1, 1}
	body = append(append(body, "447700900123"...), 0, 0, 0)
	body = append(append(body, "SHOP"...), 0, 0x04, 0, 0) // esm_class receipt, registered_delivery, data_coding
	body = append(body, 0x00, 0x1E, 0, 3, '4', '2', 0)
	body = append(body, 0x04, 0x24, 0, 12)
	body = append(body, "id:42 stat:X"...)
	frame := smpp.EncodeSimple(smpp.CmdDataSM, 0, 3, body)
	m, err := parseMessage(frame)
	if err != nil {
		t.Fatal(err)
	}
	r := readReceipt(m)
	if !m.isReceipt() || r.id != "42" || r.text.ID != "42" {
		t.Fatalf("data_sm receipt: %v %q %q", m.isReceipt(), r.id, r.text.ID)
	}
	out := r.rewrite("P1")
	m2, err := parseMessage(smpp.EncodeSimple(smpp.CmdDataSM, 0, 3, out))
	if err != nil || string(m2.userData()) != "id:P1 stat:X" {
		t.Errorf("rewritten data_sm payload = %q, %v; want id:P1 stat:X", m2.userData(), err)
	}
}

func FuzzParseReceiptText(f *testing.F) {
	f.Add([]byte("id:1234567890 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:Hello"))
	f.Add([]byte("ID:abc SUBMIT_DATE:250314150901 STAT:UNDELIV"))
	f.Add([]byte("id: stat: text:"))
	f.Add([]byte("\xff\xfeid:\x00 id:1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := ParseReceiptText(b)
		if ok != (r.HasID() || r.Stat != "") {
			t.Fatalf("ParseReceiptText(%q) ok = %v with %+v", b, ok, r)
		}
		if !r.HasID() {
			if got := (textLayout{}).rewriteID(b, r, "X"); !bytes.Equal(got, b) {
				t.Fatalf("rewriteID without an id changed %q to %q", b, got)
			}
			return
		}
		if r.idOff < 0 || r.idOff+len(r.ID) > len(b) || string(b[r.idOff:r.idOff+len(r.ID)]) != r.ID {
			t.Fatalf("ParseReceiptText(%q): id %q not at offset %d", b, r.ID, r.idOff)
		}
		out := textLayout{}.rewriteID(b, r, "P-1")
		again, ok := ParseReceiptText(out)
		if !ok || again.ID != "P-1" || again.Stat != r.Stat || again.SubmitDate != r.SubmitDate {
			t.Fatalf("ParseReceiptText(rewriteID(%q)) = %+v; want id P-1, other fields as %+v", b, again, r)
		}
		if len(out) != len(b)-len(r.ID)+3 {
			t.Fatalf("rewriteID changed other bytes: %q → %q", b, out)
		}
	})
}

func FuzzParseMessage(f *testing.F) {
	f.Add(receiptFrame("id:1 stat:DELIVRD text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1\x00")}))
	f.Add(smpp.EncodeSimple(smpp.CmdDataSM, 0, 1, []byte{0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0}))
	f.Add(smpp.EncodeSimple(smpp.CmdDeliverSM, 0, 1, nil))
	f.Add(ucs2Receipt("id:1 stat:DELIVRD text:x", true))
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) >= smpp.HeaderLen {
			id := smpp.CmdDeliverSM
			if frame[7]&1 != 0 {
				id = smpp.CmdDataSM
			}
			smpp.PutHeader(frame, smpp.Header{Length: uint32(len(frame)), ID: id, Sequence: 1})
		}
		m, err := parseMessage(frame)
		if err != nil {
			return
		}
		if !bytes.Equal(m.body(), frame[smpp.HeaderLen:]) {
			t.Fatalf("body() of %x = %x; want the received body", frame, m.body())
		}
		if m.isReceipt() {
			r := readReceipt(m)
			out := r.rewrite("P-1")
			if _, err := parseMessage(smpp.EncodeSimple(m.cmd, 0, 1, out)); err != nil {
				t.Fatalf("rewritten receipt %x does not parse: %v", out, err)
			}
		}
	})
}
