package dlr

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// ReceiptText is the conventional delivery receipt text (SMPP v3.4
// Appendix B), which SMSCs write with small variations:
//
//	id:IIIIIIIIII sub:SSS dlvrd:DDD submit date:YYMMDDhhmm done date:YYMMDDhhmm stat:DDDDDDD err:E text:...
//
// Keys are matched without regard to case at the start of a word ("submit
// date", "submit_date" and "submitdate" are one key); a value runs to the
// next space. Parsing stops at "text:": what follows is the start of the
// original message, which is never interpreted, kept or logged. The first
// occurrence of a key wins.
type ReceiptText struct {
	ID, Sub, Dlvrd, SubmitDate, DoneDate, Stat, Err string
	// idOff is the offset of ID's value in the parsed text, -1 when there
	// is no id field.
	idOff int
	// textOff is the offset just past "text:", -1 when there is none.
	textOff int
	// firstOff is the offset of the first field's key, -1 when there
	// is none.
	firstOff int
}

// HasID reports whether the text had an id field.
func (r ReceiptText) HasID() bool { return r.idOff >= 0 }

var receiptKeys = []struct {
	key   string
	field func(*ReceiptText) *string
}{
	{"id:", func(r *ReceiptText) *string { return &r.ID }},
	{"sub:", func(r *ReceiptText) *string { return &r.Sub }},
	{"dlvrd:", func(r *ReceiptText) *string { return &r.Dlvrd }},
	{"submit date:", func(r *ReceiptText) *string { return &r.SubmitDate }},
	{"submit_date:", func(r *ReceiptText) *string { return &r.SubmitDate }},
	{"submitdate:", func(r *ReceiptText) *string { return &r.SubmitDate }},
	{"done date:", func(r *ReceiptText) *string { return &r.DoneDate }},
	{"done_date:", func(r *ReceiptText) *string { return &r.DoneDate }},
	{"donedate:", func(r *ReceiptText) *string { return &r.DoneDate }},
	{"stat:", func(r *ReceiptText) *string { return &r.Stat }},
	{"err:", func(r *ReceiptText) *string { return &r.Err }},
	{"text:", nil},
}

// ParseReceiptText parses a receipt text. ok is false when it has neither
// an id nor a stat field (it is then not a receipt text).
func ParseReceiptText(b []byte) (r ReceiptText, ok bool) {
	r.idOff, r.textOff, r.firstOff = -1, -1, -1
	seen := map[*string]bool{}
	for i := 0; i < len(b); {
		if i > 0 && b[i-1] != ' ' {
			i++
			continue
		}
		matched := false
		for _, k := range receiptKeys {
			if !hasPrefixFold(b[i:], k.key) {
				continue
			}
			if k.field == nil { // text: the rest is message content
				r.textOff = i + len(k.key)
				return r, r.idOff >= 0 || r.Stat != ""
			}
			if r.firstOff < 0 {
				r.firstOff = i
			}
			start := i + len(k.key)
			end := start
			for end < len(b) && b[end] != ' ' {
				end++
			}
			if f := k.field(&r); !seen[f] && end > start {
				seen[f] = true
				*f = string(b[start:end])
				if k.key == "id:" {
					r.idOff = start
				}
			}
			i, matched = end, true
			break
		}
		if !matched {
			i++
		}
	}
	return r, r.idOff >= 0 || r.Stat != ""
}

// hasPrefixFold reports whether b starts with the lower-case ASCII key,
// ignoring ASCII case (byte for byte: offsets stay valid).
func hasPrefixFold(b []byte, key string) bool {
	if len(b) < len(key) {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != key[i] {
			return false
		}
	}
	return true
}

// SubmitTime parses the submit date (YYMMDDhhmm or YYMMDDhhmmss) in loc.
func (r ReceiptText) SubmitTime(loc *time.Location) (time.Time, bool) {
	for _, layout := range []string{"0601021504", "060102150405"} {
		if len(r.SubmitDate) == len(layout) {
			if t, err := time.ParseInLocation(layout, r.SubmitDate, loc); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// receipt is what the proxy reads from a receipt deliver_sm/data_sm.
type receipt struct {
	m    *message
	text ReceiptText
	// id is receipted_message_id, else the text's id (as the upstream
	// wrote it in its receipts).
	id     string
	tlvID  bool   // id came from the TLV
	tlv    string // receipted_message_id ("" when absent or empty)
	stat   string
	state  state.DeliveryState
	layout textLayout // how the user data is read as text
}

// messageStates maps the message_state TLV (SMPP v3.4 §5.2.28).
var messageStates = map[byte]state.DeliveryState{
	1: state.DeliveryEnroute, 2: state.DeliveryDelivered, 3: state.DeliveryExpired,
	4: state.DeliveryDeleted, 5: state.DeliveryUndeliverable, 6: state.DeliveryAccepted,
	7: state.DeliveryUnknown, 8: state.DeliveryRejected, 9: state.DeliverySkipped,
}

// statStates maps the receipt text's stat (SMPP v3.4 Appendix B).
var statStates = map[string]state.DeliveryState{
	"ENROUTE": state.DeliveryEnroute, "DELIVRD": state.DeliveryDelivered, "EXPIRED": state.DeliveryExpired,
	"DELETED": state.DeliveryDeleted, "UNDELIV": state.DeliveryUndeliverable, "ACCEPTD": state.DeliveryAccepted,
	"UNKNOWN": state.DeliveryUnknown, "REJECTD": state.DeliveryRejected, "SKIPPED": state.DeliverySkipped,
	"DELIVERED": state.DeliveryDelivered, "UNDELIVERABLE": state.DeliveryUndeliverable,
	"ACCEPTED": state.DeliveryAccepted, "REJECTED": state.DeliveryRejected,
}

// readReceipt extracts the receipt fields of m (a receipt by esm_class).
// The text: field's content is dropped at once, so it is never stored,
// logged or passed on (a deliberate deviation from "every other field
// passes through": the store must never hold an OTP).
func readReceipt(m *message) *receipt {
	r := &receipt{m: m}
	ud := m.userData()
	var cut int
	r.layout, r.text, cut = readText(m, ud)
	if cut < len(ud) {
		_ = m.setUserData(ud[:cut:cut])
	}
	for i := range m.tlvs {
		// Every message_payload: userData reads only the first, and only
		// when short_message is empty (SMPP forbids both, and a second
		// one; an SMSC may send them all the same).
		if pl := m.tlvs[i].Value; m.tlvs[i].Tag == smpp.TagMessagePayload {
			if _, _, cut := readText(m, pl); cut < len(pl) {
				m.tlvs[i].Value = pl[:cut:cut]
			}
		}
	}
	if v, ok := m.tlv(smpp.TagReceiptedMessageID); ok {
		r.tlv = string(bytes.TrimRight(v, "\x00"))
		r.id, r.tlvID = r.tlv, true
	}
	if r.id == "" {
		r.id, r.tlvID = r.text.ID, false
	}
	r.stat = r.text.Stat
	if v, ok := m.tlv(smpp.TagMessageState); ok && len(v) == 1 {
		r.state = messageStates[v[0]]
	}
	if r.state == "" {
		r.state = statStates[string(bytes.ToUpper([]byte(r.stat)))]
	}
	if r.state == "" && m.esmClass&0x3C == 0x20 {
		r.state = state.DeliveryEnroute // intermediate notification
	}
	if r.stat == "" {
		r.stat = string(r.state)
	}
	return r
}

// stateKey names the receipt's state for duplicate detection. body is
// the body that is queued (content-free, and rewritten when it goes to an
// ESME): a receipt whose state cannot be read is told apart from the
// other receipts of its message by a hash of body, so only the very same
// receipt is a duplicate of it.
func (r *receipt) stateKey(body []byte) string {
	if r.state != "" {
		return string(r.state)
	}
	if r.stat != "" {
		return string(bytes.ToUpper([]byte(r.stat)))
	}
	h := sha256.Sum256(body)
	return "body:" + hex.EncodeToString(h[:16])
}

// rewrite returns the body to deliver to the ESME: receipted_message_id
// and the text's id set to clientID, everything else as received (the
// mandatory fields are re-emitted byte for byte, so a receipt whose ids
// already read clientID is delivered exactly as received). A text that
// would no longer fit short_message keeps its id; the TLV, when present,
// still carries clientID.
func (r *receipt) rewrite(clientID string) []byte {
	if v, ok := r.m.tlv(smpp.TagReceiptedMessageID); ok && string(bytes.TrimRight(v, "\x00")) != clientID {
		nv := []byte(clientID)
		if len(v) > 0 && v[len(v)-1] == 0 {
			nv = append(nv, 0)
		}
		r.m.setTLV(smpp.TagReceiptedMessageID, nv)
	}
	if r.text.HasID() && r.text.ID != clientID {
		_ = r.m.setUserData(r.layout.rewriteID(r.m.userData(), r.text, clientID))
	}
	return r.m.body()
}

// ucs2Coding is the data_coding of UCS-2 (UTF-16BE) user data.
const ucs2Coding = 0x08

// textLayout is how a receipt's user data is read as its text: after its
// user data header (skip octets, esm_class UDHI), one octet per
// character, or, for UCS-2, two.
type textLayout struct {
	skip int
	wide bool
}

// readText reads ud, m's user data (or its message_payload), as a
// receipt text every way it may be laid out: after its user data header
// when esm_class says there is one and one is there (SMSCs copy the UDHI
// bit of a multipart message onto its receipt), or from its start; as
// UCS-2 when data_coding says so, or as octets (SMSCs often write an
// ASCII receipt under the data_coding of the message, 8 for a Cyrillic
// one, and copy the message after text: in UCS-2). It returns where to
// cut ud, at the earliest text: any reading finds, so that a reading that
// took the message's own words for fields cannot keep it, and the reading
// of what precedes the cut whose fields begin first (then the one with
// the most).
func readText(m *message, ud []byte) (textLayout, ReceiptText, int) {
	skips := []int{0}
	if n, ok := udhLen(ud); ok && m.esmClass&0x40 != 0 {
		skips = []int{n, 0}
	}
	var layouts []textLayout
	for _, skip := range skips {
		if ucs2Coded(m.dataCoding) {
			layouts = append(layouts, textLayout{skip: skip, wide: true})
		}
		layouts = append(layouts, textLayout{skip: skip})
	}
	cut := len(ud)
	texts := make([]ReceiptText, len(layouts))
	for i, l := range layouts {
		if texts[i], _ = ParseReceiptText(l.view(ud)); texts[i].textOff >= 0 {
			cut = min(cut, l.at(texts[i].textOff))
		}
	}
	// Read on what is before the cut only: what follows is the message,
	// whose words may look like fields. The reading whose fields begin
	// first wins (a receipt's come before the message, which an SMSC may
	// copy without text:), then the one with the most (from review).
	var best textLayout
	bestText, _ := ParseReceiptText(nil)
	bestAt, score := len(ud)+1, 0
	for i, l := range layouts {
		if l.skip > cut {
			continue
		}
		t := texts[i]
		if own := t.textOff >= 0 && l.at(t.textOff) == cut; !own && cut < len(ud) {
			// Its text: is not the cut (or it has none): read again up to
			// the cut. (A reading cut at its own text: read the same.)
			t, _ = ParseReceiptText(l.view(ud[:cut]))
		}
		n := t.fields()
		if n == 0 {
			continue
		}
		if at := l.at(max(t.firstOff, 0)); at < bestAt || at == bestAt && n > score {
			best, bestText, bestAt, score = l, t, at, n
		}
	}
	return best, bestText, cut
}

// ucs2Coded reports whether data_coding dc says UCS-2: SMPP's 0x08, or a
// GSM 03.38 coding group that does (general coding and automatic
// deletion, alphabet bits 10; message waiting, UCS-2), which SMSCs pass
// for flash or class-marked messages.
func ucs2Coded(dc byte) bool {
	switch {
	case dc == ucs2Coding:
		return true
	case dc >= 0x10 && dc < 0x80:
		return dc&0x0C == 0x08
	default:
		return dc&0xF0 == 0xE0
	}
}

// fields counts the fields of r that were found (text: counts as one).
func (r ReceiptText) fields() int {
	n := 0
	for _, v := range []string{r.ID, r.Sub, r.Dlvrd, r.SubmitDate, r.DoneDate, r.Stat, r.Err} {
		if v != "" {
			n++
		}
	}
	if r.textOff >= 0 {
		n++
	}
	return n
}

// udhLen is the length of the user data header ud starts with, its
// length octet included, when its information elements fill it exactly.
func udhLen(ud []byte) (int, bool) {
	if len(ud) == 0 || 1+int(ud[0]) > len(ud) {
		return 0, false
	}
	end := 1 + int(ud[0])
	i := 1
	for i+2 <= end {
		i += 2 + int(ud[i+1])
	}
	return end, i == end
}

// view is ud as ParseReceiptText reads it: after the header, each UCS-2
// character as one octet, its own when below 0x100, else 0xFF (in no key
// and no id); a stray last octet is left out. Offsets into the view are
// characters (at).
func (l textLayout) view(ud []byte) []byte {
	ud = ud[l.skip:]
	if !l.wide {
		return ud
	}
	v := make([]byte, len(ud)/2)
	for i := range v {
		if ud[2*i] == 0 {
			v[i] = ud[2*i+1]
		} else {
			v[i] = 0xFF
		}
	}
	return v
}

// at is the offset in the user data of offset i of the view.
func (l textLayout) at(i int) int {
	if l.wide {
		return l.skip + 2*i
	}
	return l.skip + i
}

// rewriteID is ud with the value of its id field replaced by id (t parsed
// from its view), every other octet unchanged.
func (l textLayout) rewriteID(ud []byte, t ReceiptText, id string) []byte {
	start, end := l.at(t.idOff), l.at(t.idOff+len(t.ID))
	if t.idOff < 0 || end > len(ud) {
		return ud
	}
	out := make([]byte, 0, len(ud)-(end-start)+2*len(id))
	out = append(out, ud[:start]...)
	for i := 0; i < len(id); i++ {
		if l.wide {
			out = append(out, 0)
		}
		out = append(out, id[i])
	}
	return append(out, ud[end:]...)
}
