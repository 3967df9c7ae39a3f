package esme

import (
	"strings"

	"github.com/smppproxy/smppproxy/smpp"
)

// Deliver is a deliver_sm received from the peer: a delivery receipt or an
// MO message.
type Deliver struct {
	Seq            uint32
	ServiceType    string
	SrcTON, SrcNPI byte
	Src            string
	DstTON, DstNPI byte
	Dst            string
	EsmClass       byte
	DataCoding     byte
	// Text is short_message, or message_payload when short_message is empty.
	Text []byte
	TLVs []smpp.TLV
	// ReceiptedID is the receipted_message_id TLV, else the receipt text's
	// "id:" field; "" when neither is present.
	ReceiptedID string
	// Stat is the receipt text's "stat:" field (DELIVRD, UNDELIV, ...).
	Stat string
	// MessageState is the message_state TLV, 0 when absent.
	MessageState byte
	Frame        []byte
}

// IsReceipt reports whether esm_class marks a delivery receipt or an
// intermediate notification.
func (d Deliver) IsReceipt() bool { return d.EsmClass&0x3C == 0x04 || d.EsmClass&0x3C == 0x20 }

// TLV returns the first TLV with tag.
func (d Deliver) TLV(tag uint16) ([]byte, bool) {
	for _, t := range d.TLVs {
		if t.Tag == tag {
			return t.Value, true
		}
	}
	return nil, false
}

// deliver_sm and submit_sm share their body layout, so smpp.ParseSubmit
// decodes both.
func parseDeliver(frame []byte) (Deliver, error) {
	s, err := smpp.ParseSubmit(frame)
	if err != nil {
		return Deliver{}, err
	}
	d := Deliver{
		Seq:         s.Header.Sequence,
		ServiceType: string(s.ServiceType),
		SrcTON:      s.SrcTON, SrcNPI: s.SrcNPI, Src: string(s.SrcAddr),
		DstTON: s.DstTON, DstNPI: s.DstNPI, Dst: string(s.DstAddr),
		EsmClass:   s.EsmClass,
		DataCoding: s.DataCoding,
		Text:       s.UserData(),
		TLVs:       s.TLVs,
		Frame:      frame,
	}
	if v, ok := s.TLV(smpp.TagReceiptedMessageID); ok {
		d.ReceiptedID = strings.TrimRight(string(v), "\x00")
	}
	if v, ok := s.TLV(smpp.TagMessageState); ok && len(v) == 1 {
		d.MessageState = v[0]
	}
	if d.IsReceipt() {
		for _, f := range strings.Fields(string(d.Text)) {
			k, v, ok := strings.Cut(f, ":")
			if !ok {
				continue
			}
			switch strings.ToLower(k) {
			case "id":
				if d.ReceiptedID == "" {
					d.ReceiptedID = v
				}
			case "stat":
				d.Stat = v
			}
		}
	}
	return d, nil
}
