package dlr

import (
	"errors"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// A receipt whose TLV and text name two different records is a conflict,
// and one that names nothing is "no record": the two are never taken for
// each other, neither on arrival (match) nor when kept (find).
func TestReceiptIDConflictIsNotNoRecord(t *testing.T) {
	e := newEnv(t)
	e.accepted(t, "bank", "kb", "4d2") // decimal 1234
	e.accepted(t, "shop", "ks", "3e8") // decimal 1000
	conflict := readReceipt(mustParse(t, receiptFrame("id:1000 stat:DELIVRD err:000 text:", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1234\x00")})))
	nothing := readReceipt(mustParse(t, dlrFrame("77", "DELIVRD")))

	if _, err := e.svc.match(bg, "smsc", conflict); !errors.Is(err, errIDConflict) || errors.Is(err, state.ErrNotFound) {
		t.Errorf("match(conflicting ids) = %v; want errIDConflict, not ErrNotFound", err)
	}
	if _, err := e.svc.match(bg, "smsc", nothing); !errors.Is(err, state.ErrNotFound) || errors.Is(err, errIDConflict) {
		t.Errorf("match(unknown id) = %v; want ErrNotFound, not errIDConflict", err)
	}
	kept := &state.QueueEntry{Enqueued: time.Now()}
	if _, _, err := e.svc.rec.find(bg, "smsc", conflict, kept); !errors.Is(err, errIDConflict) || errors.Is(err, errNoRecord) {
		t.Errorf("find(conflicting ids) = %v; want errIDConflict, not errNoRecord", err)
	}
	if _, _, err := e.svc.rec.find(bg, "smsc", nothing, kept); !errors.Is(err, errNoRecord) || errors.Is(err, errIDConflict) {
		t.Errorf("find(unknown id) = %v; want errNoRecord, not errIDConflict", err)
	}
}

// A receipt's delivery mark applies to the record it was matched with
// only: when the key holds another record by then (the matched one passed
// its dedup window and was renewed), the mark leaves it alone.
func TestDeliveryMarkLeavesARenewedRecordAlone(t *testing.T) {
	r := readReceipt(mustParse(t, dlrFrame("77", "DELIVRD")))
	now := time.Now()
	matched := &state.Record{Key: state.Key{Account: "shop", Key: "k"}, State: state.Accepted, MessageID: "77", Created: now.Add(-time.Hour)}
	renewed := &state.Record{Key: matched.Key, State: state.Sent, Created: now}
	mark := deliveryMark("smsc", r, now, matched)
	if err := mark(renewed); !errors.Is(err, state.ErrAbort) || renewed.Delivery != "" || len(renewed.History) != 0 {
		t.Errorf("mark of the renewed record = %v, delivery %q, %d events; want ErrAbort and the record untouched", err, renewed.Delivery, len(renewed.History))
	}
	same := *matched
	if err := mark(&same); err != nil || same.Delivery != state.DeliveryDelivered || len(same.History) != 1 {
		t.Errorf("mark of the matched record = %v, delivery %q, %d events; want delivered with the receipt's event", err, same.Delivery, len(same.History))
	}
}

// A receipt that names its message by receipted_message_id alone, which
// reads as two ids (the upstream's receipt format and its submit_sm_resp
// format differ) naming two live records, is a conflict: kept unmatched,
// never queued for either account. The receipt format's reading was taken
// without looking at the other, so the receipt could go to another
// customer (from review).
func TestATLVOnlyReceiptWhoseTwoReadingsNameTwoRecordsIsAConflict(t *testing.T) {
	e := newEnv(t)
	e.accepted(t, "shop", "ks", "1000") // 0x1000, as the upstream answered
	e.accepted(t, "bank", "kb", "3e8")  // 0x3e8: 1000 in the receipts' decimal
	r := readReceipt(mustParse(t, receiptFrame("stat:DELIVRD err:000", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1000\x00")})))
	if rec, err := e.svc.match(bg, "smsc", r); !errors.Is(err, errIDConflict) {
		t.Errorf("match(TLV 1000, read as 0x1000 and as 1000) = %v, %v; want errIDConflict", rec, err)
	}
	// The same with a text id that names no record (SMSCs cut the
	// text's id to 10 characters while the TLV carries it whole).
	r = readReceipt(mustParse(t, receiptFrame("id:777777 stat:DELIVRD err:000", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte("1000\x00")})))
	if rec, err := e.svc.match(bg, "smsc", r); !errors.Is(err, errIDConflict) {
		t.Errorf("match(TLV 1000, text id naming nothing) = %v, %v; want errIDConflict", rec, err)
	}
	// A reading that names nothing leaves the other one the match.
	e2 := newEnv(t)
	want := e2.accepted(t, "bank", "kb", "3e8")
	if rec, err := e2.svc.match(bg, "smsc", r); err != nil || rec == nil || rec.Key != want.Key {
		t.Errorf("match(TLV 1000) with one record named = %v, %v; want bank's", rec, err)
	}
}
