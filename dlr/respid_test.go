package dlr

import "testing"

// A receipt whose only id is a receipted_message_id that reads as two
// different messages — as the upstream writes receipts (decimal here) and
// as it writes submit_sm_resp ids (hex), which some SMSCs put in the TLV —
// gives no id to settle a record with; one that reads one way only does.
func TestAReceiptIDWithTwoReadingsSettlesNothing(t *testing.T) {
	s := &Service{ids: testIDs}
	if id, ok := s.respIDOf("smsc", &receipt{tlv: "12345678"}); ok {
		t.Errorf("respIDOf(TLV 12345678, hex responses, decimal receipts) = %q, true; want no id: it is 0x12345678 or 12345678", id)
	}
	if id, ok := s.respIDOf("smsc", &receipt{tlv: "bc614e"}); !ok || id != "bc614e" {
		t.Errorf("respIDOf(TLV bc614e) = %q, %v; want bc614e (hex only)", id, ok)
	}
	if id, ok := s.respIDOf("smsc", &receipt{tlv: "12345678", text: ReceiptText{ID: "12345678"}}); !ok || id != "bc614e" {
		t.Errorf("respIDOf(TLV and text id 12345678) = %q, %v; want bc614e (both as receipts write ids)", id, ok)
	}
}
