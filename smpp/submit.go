package smpp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
)

// TLV tags the proxy interprets.
const (
	TagSarMsgRefNum         uint16 = 0x020C
	TagSarTotalSegments     uint16 = 0x020E
	TagSarSegmentSeqnum     uint16 = 0x020F
	TagMessagePayload       uint16 = 0x0424
	TagUserMessageReference uint16 = 0x0204
	TagReceiptedMessageID   uint16 = 0x001E
	TagMessageState         uint16 = 0x0427
	DefaultIdempotencyTag   uint16 = 0x1400
	esmClassUDHI                   = 0x40
)

// TLV is one optional parameter, in wire order.
type TLV struct {
	Tag   uint16
	Value []byte
}

// Submit is a byte-exact view of a submit_sm. Slices alias the frame it was
// parsed from; the frame must not be modified while the view is used.
type Submit struct {
	Header               Header
	ServiceType          []byte
	SrcTON, SrcNPI       byte
	SrcAddr              []byte
	DstTON, DstNPI       byte
	DstAddr              []byte
	EsmClass             byte
	ProtocolID           byte
	PriorityFlag         byte
	ScheduleDeliveryTime []byte
	ValidityPeriod       []byte
	RegisteredDelivery   byte
	ReplaceIfPresent     byte
	DataCoding           byte
	SmDefaultMsgID       byte
	ShortMessage         []byte
	TLVs                 []TLV

	mandatory []byte // body bytes before the first TLV
	// tlvs holds the first TLVs, so that a usual submit is parsed in
	// one allocation (TLVs is cut to its length: appending copies).
	tlvs [4]TLV
}

// FieldError is a submit_sm decoding failure with the status that answers it.
type FieldError struct {
	Status Status
	Field  string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("smpp: submit_sm: bad %s (%s)", e.Field, e.Status)
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) cstring(field string, max int) ([]byte, error) {
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 || i >= max {
		return nil, &FieldError{Status: StatusInvCmdLen, Field: field}
	}
	s := r.b[r.off : r.off+i]
	r.off += i + 1
	return s, nil
}

func (r *reader) byte1(field string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, &FieldError{Status: StatusInvCmdLen, Field: field}
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// ParseSubmit decodes a whole submit_sm frame without copying.
// C-Octet strings are accepted up to 65 octets (SMPP v5 sizes) so that the
// proxy stays transparent for lenient clients; a missing terminator,
// truncated fields, an sm_length past the body or a broken TLV stream are
// refused with a *FieldError naming the SMPP status to answer with.
func ParseSubmit(frame []byte) (*Submit, error) {
	if len(frame) < HeaderLen {
		return nil, &FieldError{Status: StatusInvCmdLen, Field: "header"}
	}
	s := &Submit{Header: ParseHeader(frame)}
	r := &reader{b: frame[HeaderLen:]}
	var err error
	get := func(dst *[]byte, f string, max int) {
		if err == nil {
			*dst, err = r.cstring(f, max)
		}
	}
	getb := func(dst *byte, f string) {
		if err == nil {
			*dst, err = r.byte1(f)
		}
	}
	get(&s.ServiceType, "service_type", 66)
	getb(&s.SrcTON, "source_addr_ton")
	getb(&s.SrcNPI, "source_addr_npi")
	get(&s.SrcAddr, "source_addr", 66)
	getb(&s.DstTON, "dest_addr_ton")
	getb(&s.DstNPI, "dest_addr_npi")
	get(&s.DstAddr, "destination_addr", 66)
	getb(&s.EsmClass, "esm_class")
	getb(&s.ProtocolID, "protocol_id")
	getb(&s.PriorityFlag, "priority_flag")
	get(&s.ScheduleDeliveryTime, "schedule_delivery_time", 18)
	get(&s.ValidityPeriod, "validity_period", 18)
	getb(&s.RegisteredDelivery, "registered_delivery")
	getb(&s.ReplaceIfPresent, "replace_if_present_flag")
	getb(&s.DataCoding, "data_coding")
	getb(&s.SmDefaultMsgID, "sm_default_msg_id")
	var n byte
	getb(&n, "sm_length")
	if err != nil {
		return nil, err
	}
	if r.off+int(n) > len(r.b) {
		return nil, &FieldError{Status: StatusInvMsgLen, Field: "sm_length"}
	}
	s.ShortMessage = r.b[r.off : r.off+int(n)]
	r.off += int(n)
	s.mandatory = r.b[:r.off]
	s.TLVs, err = appendTLVs(s.tlvs[:0], r.b[r.off:])
	if err != nil {
		return nil, err
	}
	if len(s.TLVs) == 0 {
		s.TLVs = nil
	}
	s.TLVs = s.TLVs[:len(s.TLVs):len(s.TLVs)]
	return s, nil
}

// ParseTLVs splits an optional-parameter section into TLVs, in wire order
// (values alias b); a truncated TLV is ESME_RINVOPTPARSTREAM.
func ParseTLVs(b []byte) ([]TLV, error) { return appendTLVs(nil, b) }

// appendTLVs is ParseTLVs appending to out.
func appendTLVs(out []TLV, b []byte) ([]TLV, error) {
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, &FieldError{Status: StatusInvOptParStream, Field: "tlv"}
		}
		tag := binary.BigEndian.Uint16(b)
		l := int(binary.BigEndian.Uint16(b[2:]))
		if 4+l > len(b) {
			return nil, &FieldError{Status: StatusInvOptParStream, Field: "tlv"}
		}
		out = append(out, TLV{Tag: tag, Value: b[4 : 4+l]})
		b = b[4+l:]
	}
	return out, nil
}

// TLV returns the value of the first TLV with tag.
func (s *Submit) TLV(tag uint16) ([]byte, bool) {
	for _, t := range s.TLVs {
		if t.Tag == tag {
			return t.Value, true
		}
	}
	return nil, false
}

// UserData returns short_message, or message_payload when short_message is
// empty.
func (s *Submit) UserData() []byte {
	if len(s.ShortMessage) == 0 {
		if v, ok := s.TLV(TagMessagePayload); ok {
			return v
		}
	}
	return s.ShortMessage
}

// Segment identifies one part of a concatenated message.
type Segment struct {
	Ref   uint16 // reference number (not part of identity: clients may renew it on retry)
	Total uint8
	Seq   uint8
	// refOff is the offset of the reference bytes in UserData (UDH only), refLen their size.
	refOff, refLen int
}

// String is the segment identity used in record keys: "seq/total", or ""
// for a message that is not concatenated.
func (g Segment) String() string {
	if g.Total == 0 {
		return ""
	}
	return strconv.Itoa(int(g.Seq)) + "/" + strconv.Itoa(int(g.Total))
}

// Segment returns the concatenation identity from the UDH (IEI 0x00 or
// 0x08, when esm_class has UDHI) or from the sar_* TLVs. A message that is
// not concatenated returns the zero Segment.
func (s *Submit) Segment() Segment {
	if s.EsmClass&esmClassUDHI != 0 {
		ud := s.UserData()
		if len(ud) > 0 {
			udhl := int(ud[0])
			if udhl+1 <= len(ud) {
				for i := 1; i+1 < udhl+1; {
					iei, l := ud[i], int(ud[i+1])
					v := i + 2
					if v+l > udhl+1 {
						break
					}
					switch {
					case iei == 0x00 && l == 3:
						return Segment{Ref: uint16(ud[v]), Total: ud[v+1], Seq: ud[v+2], refOff: v, refLen: 1}
					case iei == 0x08 && l == 4:
						return Segment{Ref: binary.BigEndian.Uint16(ud[v:]), Total: ud[v+2], Seq: ud[v+3], refOff: v, refLen: 2}
					}
					i = v + l
				}
			}
		}
	}
	tot, ok1 := s.TLV(TagSarTotalSegments)
	seq, ok2 := s.TLV(TagSarSegmentSeqnum)
	if ok1 && ok2 && len(tot) == 1 && len(seq) == 1 {
		g := Segment{Total: tot[0], Seq: seq[0]}
		if ref, ok := s.TLV(TagSarMsgRefNum); ok && len(ref) == 2 {
			g.Ref = binary.BigEndian.Uint16(ref)
		}
		return g
	}
	return Segment{}
}

// Fingerprint is the unsalted SHA-256 over the significant parameters of
// the submit (SPEC §2): service_type, source and destination ton/npi/addr,
// esm_class, protocol_id, priority_flag, registered_delivery, data_coding,
// the user data (short_message or message_payload) and the segment
// identity. The concatenation reference number is zeroed in the hashed
// copy so a client that renews it on retry is not taken for a conflict.
// sequence_number, schedule_delivery_time, validity_period and the key TLV
// are excluded. It is the legacy (version 1) fingerprint: the proxy keys
// it with a per-install secret (FingerprintWith an HMAC), since a short
// message such as an OTP can be recovered from the plain hash.
func (s *Submit) Fingerprint() [32]byte { return s.FingerprintOf(s.Segment()) }

// FingerprintOf is Fingerprint for a caller that already has the submit's
// Segment (it walks the UDH and TLVs only once per submit).
func (s *Submit) FingerprintOf(g Segment) [32]byte {
	return s.FingerprintWith(g, sha256.New())
}

// FingerprintWith writes the fields of Fingerprint into h (a fresh or
// reset hash with a 32-byte sum, such as an HMAC-SHA256) and returns its
// sum.
func (s *Submit) FingerprintWith(g Segment, h hash.Hash) [32]byte {
	var lb [4]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint32(lb[:], uint32(len(b)))
		h.Write(lb[:])
		h.Write(b)
	}
	field(s.ServiceType)
	field([]byte{s.SrcTON, s.SrcNPI})
	field(s.SrcAddr)
	field([]byte{s.DstTON, s.DstNPI})
	field(s.DstAddr)
	field([]byte{s.EsmClass, s.ProtocolID, s.PriorityFlag, s.RegisteredDelivery, s.DataCoding})
	ud := s.UserData()
	if g.refLen > 0 {
		c := append([]byte(nil), ud...)
		for i := 0; i < g.refLen; i++ {
			c[g.refOff+i] = 0
		}
		ud = c
	}
	field(ud)
	field([]byte(g.String()))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Frame re-encodes the submit with a new sequence number, byte-for-byte
// identical otherwise, leaving out every TLV whose tag is in drop.
func (s *Submit) Frame(seq uint32, drop ...uint16) []byte {
	n := HeaderLen + len(s.mandatory)
	keep := func(tag uint16) bool {
		for _, d := range drop {
			if d == tag {
				return false
			}
		}
		return true
	}
	for _, t := range s.TLVs {
		if keep(t.Tag) {
			n += 4 + len(t.Value)
		}
	}
	b := make([]byte, HeaderLen, n)
	PutHeader(b, Header{Length: uint32(n), ID: CmdSubmitSM, Sequence: seq}) // a request's command_status is 0
	b = append(b, s.mandatory...)
	for _, t := range s.TLVs {
		if keep(t.Tag) {
			b = binary.BigEndian.AppendUint16(b, t.Tag)
			b = binary.BigEndian.AppendUint16(b, uint16(len(t.Value)))
			b = append(b, t.Value...)
		}
	}
	return b
}
