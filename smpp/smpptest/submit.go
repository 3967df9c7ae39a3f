// Package smpptest builds SMPP frames for tests and tools, as
// net/http/httptest does for HTTP: what the proxy itself never encodes
// (a submit_sm from its parts) lives here, not in package smpp.
package smpptest

import "github.com/smppproxy/smppproxy/smpp"

// SubmitFields are the parameters of a submit_sm to encode.
type SubmitFields struct {
	ServiceType                    string
	SrcTON, SrcNPI                 byte
	Src                            string
	DstTON, DstNPI                 byte
	Dst                            string
	EsmClass, ProtocolID, Priority byte
	Schedule, Validity             string
	RegisteredDelivery             byte
	DataCoding                     byte
	ShortMessage                   []byte
	TLVs                           []smpp.TLV
}

// EncodeSubmit encodes a complete submit_sm frame.
func EncodeSubmit(seq uint32, f SubmitFields) []byte {
	b := make([]byte, smpp.HeaderLen, smpp.HeaderLen+64+len(f.ShortMessage))
	cstr := func(s string) { b = append(append(b, s...), 0) }
	cstr(f.ServiceType)
	b = append(b, f.SrcTON, f.SrcNPI)
	cstr(f.Src)
	b = append(b, f.DstTON, f.DstNPI)
	cstr(f.Dst)
	b = append(b, f.EsmClass, f.ProtocolID, f.Priority)
	cstr(f.Schedule)
	cstr(f.Validity)
	b = append(b, f.RegisteredDelivery, 0, f.DataCoding, 0, byte(len(f.ShortMessage)))
	b = append(b, f.ShortMessage...)
	for _, t := range f.TLVs {
		b = append(b, byte(t.Tag>>8), byte(t.Tag), byte(len(t.Value)>>8), byte(len(t.Value)))
		b = append(b, t.Value...)
	}
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdSubmitSM, Sequence: seq})
	return b
}
