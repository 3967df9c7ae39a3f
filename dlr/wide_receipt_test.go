package dlr

import (
	"bytes"
	"fmt"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

// ucs2 is s in UCS-2 (UTF-16BE), as data_coding 8 carries it.
func ucs2(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u>>8), byte(u))
	}
	return b
}

// ucs2Receipt is a receipt deliver_sm whose text is in UCS-2 (an SMSC
// answering a UCS-2 message so), in short_message or, when payload is
// set, in message_payload too.
func ucs2Receipt(text string, payload bool) []byte {
	f := smpptest.SubmitFields{Src: "447700900123", Dst: "SHOP", EsmClass: 0x04, DataCoding: 0x08, ShortMessage: ucs2(text)}
	if payload {
		f.TLVs = []smpp.TLV{{Tag: smpp.TagMessagePayload, Value: ucs2(text)}}
	}
	b := smpptest.EncodeSubmit(7, f)
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 7})
	return b
}

// A receipt written in UCS-2 (data_coding 8) is read like any other: its
// id matches the record, the start of the message after text: (a Cyrillic
// OTP here) is dropped before the receipt is stored, in short_message and
// in message_payload alike, and the ESME's copy names the id the client
// was given. Only ASCII texts were read: the OTP was stored and delivered,
// the SMSC's id passed on, and a receipt without receipted_message_id
// never matched (from review).
func TestAUCS2ReceiptIsMatchedAndKeepsNoMessageText(t *testing.T) {
	const otp = "Код 482913"
	for _, payload := range []bool{false, true} {
		t.Run(fmt.Sprint("message_payload too: ", payload), func(t *testing.T) {
			e := newEnv(t)
			rec := e.accepted(t, "shop", "k-ucs2", "3e8")
			now := time.Now().UTC().Format("0601021504")
			text := fmt.Sprintf("id:1000 sub:001 dlvrd:001 submit date:%s done date:%s stat:DELIVRD err:000 text:%s", now, now, otp)
			if st := e.deliver(t, ucs2Receipt(text, payload)); st != 0 {
				t.Fatalf("the UCS-2 receipt was answered 0x%08X", uint32(st))
			}
			expectCutAndDelivered(t, e, rec, "482913", "Код")
		})
	}
}

// receiptWith is a receipt deliver_sm of user data ud, data_coding dc and
// esm_class 0x04 | udhi.
func receiptWith(ud []byte, dc, udhi byte) []byte {
	f := smpptest.SubmitFields{Src: "447700900123", Dst: "SHOP", EsmClass: 0x04 | udhi, DataCoding: dc, ShortMessage: ud}
	b := smpptest.EncodeSubmit(7, f)
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 7})
	return b
}

// Receipt texts as SMSCs write them: in ASCII under the data_coding of
// the message (8 for a Cyrillic OTP), of either length; in UCS-2 after a
// user data header (6 or 7 octets) or with a stray last octet. Each is
// matched and cut: the OTP reaches neither the store nor the ESME. (The
// first UCS-2 reading took any even-length text of data_coding 8 for
// UCS-2: an ASCII receipt lost its match and kept its OTP; an odd length,
// a header, were read as ASCII: from review.)
func TestReceiptTextsOfEveryLayoutAreMatchedAndCut(t *testing.T) {
	const otp = "482913"
	// head is a receipt text up to text: in ASCII (the message after it
	// in UCS-2, as the SMSC copied it).
	head := func(pad string) string {
		return "id:1000 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000" + pad + " text:"
	}
	// short is a short receipt text up to text: (the fields a UCS-2 copy
	// of the message after it could tie).
	short := func(pad string) string { return "id:1000 stat:DELIVRD" + pad + " text:" }
	body := func(pad string) string {
		return "id:1000 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000" + pad + " text:Code " + otp
	}
	cases := map[string][]byte{
		"ASCII, data_coding 8, even length":    receiptWith([]byte(body("")), 8, 0),
		"ASCII, data_coding 8, odd length":     receiptWith([]byte(body("0")), 8, 0),
		"UCS-2 after a 6-octet header":         receiptWith(append([]byte{5, 0, 3, 7, 2, 1}, ucs2(body(""))...), 8, 0x40),
		"UCS-2 after a 7-octet header":         receiptWith(append([]byte{6, 8, 4, 0, 7, 2, 1}, ucs2(body(""))...), 8, 0x40),
		"UCS-2 with a stray last octet":        receiptWith(append(ucs2(body("")), 0), 8, 0),
		"ASCII after a 6-octet header":         receiptWith(append([]byte{5, 0, 3, 7, 2, 1}, body("")...), 0, 0x40),
		"UCS-2, text: cut mid-message":         receiptWith(ucs2(body("")[:len(body(""))-3]), 8, 0),
		"ASCII with a stray UDHI bit":          receiptWith([]byte(body("")), 0, 0x40),
		"ASCII, data_coding 8, stray UDHI":     receiptWith([]byte(body("")), 8, 0x40),
		"UCS-2 whose octets spell a key":       receiptWith(ucs2(body("")+" \u2069\u643a1 "+otp), 8, 0),
		"ASCII, UCS-2 message with a key":      receiptWith(append([]byte(head("")), ucs2("Code id:4829 13 "+otp)...), 8, 0),
		"ASCII+1, UCS-2 message with a key":    receiptWith(append([]byte(head("0")), ucs2("Code id:4829 13 "+otp)...), 8, 0),
		"UCS-2 after an empty header":          receiptWith(append([]byte{0}, ucs2(body(""))...), 8, 0x40),
		"ASCII after an empty header":          receiptWith(append([]byte{0}, body("")...), 0, 0x40),
		"fields in the UCS-2 copy after text:": receiptWith(append([]byte(short("")), ucs2(" id:4829 err:0 text:Code "+otp)...), 8, 0),
		"fields in the UCS-2 copy, odd head":   receiptWith(append([]byte(short("0")), ucs2(" id:4829 err:0 text:Code "+otp)...), 8, 0),
		"UCS-2, data_coding 0x18 (flash)":      receiptWith(ucs2(body("")), 0x18, 0),
		"UCS-2, data_coding 0x48":              receiptWith(ucs2(body("")), 0x48, 0),
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			rec := e.accepted(t, "shop", "k", "3e8")
			if st := e.deliver(t, frame); st != 0 {
				t.Fatalf("answered 0x%08X", uint32(st))
			}
			expectCutAndDelivered(t, e, rec, otp[:4], "Code")
		})
	}
}

// expectCutAndDelivered checks that one receipt is queued for shop, that
// it holds none of parts (in ASCII or UCS-2), and that the ESME bound then
// gets it with the id rec's client was given.
func expectCutAndDelivered(t *testing.T, e *env, rec *state.Record, parts ...string) {
	t.Helper()
	es := queued(t, e.st, accountQueue("shop"))
	if len(es) != 1 {
		t.Fatalf("queued for shop: %d receipts, want the one matched", len(es))
	}
	for _, part := range parts {
		if bytes.Contains(es[0].Body, ucs2(part)) || bytes.Contains(es[0].Body, []byte(part)) {
			t.Errorf("the stored receipt holds %q of the message text", part)
		}
	}
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	waitFor(t, "the receipt delivered", func() bool { return len(rx.received()) == 1 })
	if got := rx.received()[0]; got != rec.ClientMessageID() {
		t.Errorf("the ESME's receipt names id %q, want the client's %q", got, rec.ClientMessageID())
	}
}

// A receipt carrying message_payload twice (hostile or broken) has the
// text cut in each: the second kept the OTP.
func TestEveryMessagePayloadOfAReceiptIsCut(t *testing.T) {
	e := newEnv(t)
	rec := e.accepted(t, "shop", "k", "3e8")
	text := "id:1000 sub:001 dlvrd:001 submit date:2503141509 done date:2503141510 stat:DELIVRD err:000 text:Code 482913"
	f := smpptest.SubmitFields{Src: "447700900123", Dst: "SHOP", EsmClass: 0x04, TLVs: []smpp.TLV{
		{Tag: smpp.TagMessagePayload, Value: []byte(text)}, {Tag: smpp.TagMessagePayload, Value: []byte(text)}}}
	b := smpptest.EncodeSubmit(7, f)
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 7})
	if st := e.deliver(t, b); st != 0 {
		t.Fatalf("answered 0x%08X", uint32(st))
	}
	expectCutAndDelivered(t, e, rec, "4829", "Code")
}

// A receipt without text: whose message follows in UCS-2 and holds words
// like fields is read by the receipt's own fields, the first ones in the
// text: matched by its id, not by the message's (which went to the logs
// and left the receipt unmatched: from review). Nothing can be cut
// without text:, as before.
func TestAReceiptIsReadByItsFirstFieldsNotTheMessagesWords(t *testing.T) {
	e := newEnv(t)
	rec := e.accepted(t, "shop", "k", "3e8")
	frame := receiptWith(append([]byte("id:1000 stat:DELIVRD err:0000 "), ucs2(" Your id:QZ4829 sub:1 dlvrd:1 stat:QZ")...), 8, 0)
	r := readReceipt(mustParse(t, frame))
	if r.id != "1000" || r.stat != "DELIVRD" {
		t.Errorf("read id %q stat %q, want 1000 and DELIVRD (the receipt's)", r.id, r.stat)
	}
	if st := e.deliver(t, frame); st != 0 {
		t.Fatalf("answered 0x%08X", uint32(st))
	}
	if es := queued(t, e.st, accountQueue("shop")); len(es) != 1 {
		t.Fatalf("queued for shop: %d receipts, want the one matched with record %s", len(es), rec.MessageID)
	}
}
