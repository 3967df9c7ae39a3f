package dlr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smppproxy/smppproxy/smpp"
)

// message is a byte-exact view of a deliver_sm or data_sm: the mandatory
// fields before the user data are kept as bytes and re-emitted unchanged,
// so re-encoding a message nobody modified gives the same body.
type message struct {
	cmd uint32
	// head is the body up to (deliver_sm: excluding sm_length and
	// short_message) the first TLV.
	head           []byte
	srcTON, srcNPI byte
	src            []byte
	dstTON, dstNPI byte
	dst            []byte
	esmClass       byte
	dataCoding     byte
	sm             []byte // deliver_sm's short_message; nil for data_sm
	tlvs           []smpp.TLV
}

// errNotDeliver is returned by parseMessage for another command.
var errNotDeliver = errors.New("dlr: not a deliver_sm or data_sm")

// parseMessage decodes a whole deliver_sm or data_sm frame. Slices alias
// frame. A malformed frame returns a *smpp.FieldError with the status to
// answer.
func parseMessage(frame []byte) (*message, error) {
	if len(frame) < smpp.HeaderLen {
		return nil, &smpp.FieldError{Status: smpp.StatusInvCmdLen, Field: "header"}
	}
	h := smpp.ParseHeader(frame)
	switch h.ID {
	case smpp.CmdDeliverSM, smpp.CmdDataSM:
	default:
		return nil, errNotDeliver
	}
	m := &message{cmd: h.ID}
	c := &cursor{b: frame[smpp.HeaderLen:]}
	c.cstr("service_type", 66)
	m.srcTON, m.srcNPI = c.byte1("source_addr_ton"), c.byte1("source_addr_npi")
	m.src = c.cstr("source_addr", 66)
	m.dstTON, m.dstNPI = c.byte1("dest_addr_ton"), c.byte1("dest_addr_npi")
	m.dst = c.cstr("destination_addr", 66)
	m.esmClass = c.byte1("esm_class")
	if h.ID == smpp.CmdDataSM {
		c.byte1("registered_delivery")
		m.dataCoding = c.byte1("data_coding")
	} else {
		c.byte1("protocol_id")
		c.byte1("priority_flag")
		c.cstr("schedule_delivery_time", 18)
		c.cstr("validity_period", 18)
		c.byte1("registered_delivery")
		c.byte1("replace_if_present_flag")
		m.dataCoding = c.byte1("data_coding")
		c.byte1("sm_default_msg_id")
	}
	if c.err != nil {
		return nil, c.err
	}
	m.head = c.b[:c.off]
	if h.ID == smpp.CmdDeliverSM {
		n := int(c.byte1("sm_length"))
		if c.err != nil {
			return nil, c.err
		}
		if c.off+n > len(c.b) {
			return nil, &smpp.FieldError{Status: smpp.StatusInvMsgLen, Field: "sm_length"}
		}
		m.sm = c.b[c.off : c.off+n]
		c.off += n
	}
	tlvs, err := smpp.ParseTLVs(c.b[c.off:])
	if err != nil {
		return nil, err
	}
	m.tlvs = tlvs
	return m, nil
}

// cursor reads the mandatory fields of a PDU body in order. The first
// field that does not fit sets err (ESME_RINVCMDLEN naming the field);
// every read after it returns the zero value.
type cursor struct {
	b   []byte
	off int
	err error
}

// cstr reads a NUL-terminated field of at most max octets with its NUL.
func (c *cursor) cstr(field string, max int) []byte {
	if c.err != nil {
		return nil
	}
	i := bytes.IndexByte(c.b[c.off:], 0)
	if i < 0 || i >= max {
		c.err = &smpp.FieldError{Status: smpp.StatusInvCmdLen, Field: field}
		return nil
	}
	s := c.b[c.off : c.off+i]
	c.off += i + 1
	return s
}

// byte1 reads a one-octet field.
func (c *cursor) byte1(field string) byte {
	if c.err != nil {
		return 0
	}
	if c.off >= len(c.b) {
		c.err = &smpp.FieldError{Status: smpp.StatusInvCmdLen, Field: field}
		return 0
	}
	c.off++
	return c.b[c.off-1]
}

// body encodes the message body (everything after the header).
func (m *message) body() []byte {
	n := len(m.head)
	if m.cmd == smpp.CmdDeliverSM {
		n += 1 + len(m.sm)
	}
	for _, t := range m.tlvs {
		n += 4 + len(t.Value)
	}
	b := make([]byte, 0, n)
	b = append(b, m.head...)
	if m.cmd == smpp.CmdDeliverSM {
		b = append(b, byte(len(m.sm)))
		b = append(b, m.sm...)
	}
	for _, t := range m.tlvs {
		b = binary.BigEndian.AppendUint16(b, t.Tag)
		b = binary.BigEndian.AppendUint16(b, uint16(len(t.Value)))
		b = append(b, t.Value...)
	}
	return b
}

// tlv returns the value of the first TLV with tag.
func (m *message) tlv(tag uint16) ([]byte, bool) {
	for _, t := range m.tlvs {
		if t.Tag == tag {
			return t.Value, true
		}
	}
	return nil, false
}

// userData is short_message, or message_payload when short_message is
// empty (always message_payload for data_sm).
func (m *message) userData() []byte {
	if len(m.sm) == 0 {
		if v, ok := m.tlv(smpp.TagMessagePayload); ok {
			return v
		}
	}
	return m.sm
}

// setUserData replaces what userData returned with ud. short_message is
// limited to 254 octets; longer user data there is refused.
func (m *message) setUserData(ud []byte) error {
	if len(m.sm) == 0 {
		for i := range m.tlvs {
			if m.tlvs[i].Tag == smpp.TagMessagePayload {
				if len(ud) > 0xFFFF {
					return fmt.Errorf("dlr: message_payload of %d octets", len(ud))
				}
				m.tlvs[i].Value = ud
				return nil
			}
		}
		if len(ud) == 0 {
			return nil
		}
	}
	if len(ud) > 254 || m.cmd != smpp.CmdDeliverSM {
		return fmt.Errorf("dlr: short_message of %d octets", len(ud))
	}
	m.sm = ud
	return nil
}

// setTLV replaces the value of the first TLV with tag (present or not).
func (m *message) setTLV(tag uint16, v []byte) {
	for i := range m.tlvs {
		if m.tlvs[i].Tag == tag {
			m.tlvs[i].Value = v
			return
		}
	}
}

// isReceipt reports whether esm_class marks a delivery receipt or
// acknowledgement (message type bits 2-5: 0x04 SMSC delivery receipt, 0x08
// SME delivery ack, 0x10 SME manual/user ack, 0x20 intermediate
// notification) rather than a mobile-originated message.
func (m *message) isReceipt() bool { return m.esmClass&0x3C != 0 }
