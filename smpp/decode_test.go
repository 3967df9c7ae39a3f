package smpp

import (
	"errors"
	"testing"
)

// querySMWithTLV is a query_sm (message_id "1", source 0/0/"") followed by
// one TLV: gosmpp v0.3.1 builds query_sm without its TLV map and panics
// storing the TLV.
func querySMWithTLV() []byte {
	body := []byte{'1', 0, 0, 0, 0, 0x14, 0x00, 0x00, 0x01, 'k'}
	return EncodeSimple(CmdQuerySM, StatusOK, 7, body)
}

func TestDecodeReturnsAnErrorWhereGosmppPanics(t *testing.T) {
	p, err := Decode(querySMWithTLV())
	if err == nil {
		t.Fatalf("Decode of a query_sm with a TLV = %T, nil; want an error", p)
	}
	if !errors.Is(err, ErrUndecodable) {
		t.Fatalf("Decode error = %v, want ErrUndecodable", err)
	}
}
