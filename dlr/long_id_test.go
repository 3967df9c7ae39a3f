package dlr

import (
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// A receipt with a very long id (it fits a 64 KiB PDU) is kept unmatched
// like any other, and the same receipt again is a duplicate: its dedup key
// holds a hash of what would be over the store's key limit. (Every try got
// ESME_RSYSERR, so the upstream resent it forever.)
func TestAReceiptWithAVeryLongIDIsKeptAndDeduplicated(t *testing.T) {
	st, err := state.OpenBadger(state.BadgerOptions{Path: t.TempDir(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := New(Config{Store: st, IDs: testIDs, Accounts: map[string]Account{"shop": {Redelivery: time.Minute}}, Upstreams: map[string]Upstream{"smsc": {}}})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	defer svc.Close()
	f := receiptFrame("stat:DELIVRD", smpp.TLV{Tag: smpp.TagReceiptedMessageID, Value: []byte(strings.Repeat("\x01", 33000))})
	for i := range 2 {
		if got := svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: f}); got != smpp.StatusOK {
			t.Fatalf("try %d of a receipt with a 33,000-octet id = %v, want 0", i+1, got)
		}
	}
	if kept, err := svc.Unmatched(bg, "smsc", 10); err != nil || len(kept) != 1 {
		t.Errorf("kept receipts = %d, %v; want the one, kept once", len(kept), err)
	}
}
