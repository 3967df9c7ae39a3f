package dedup

import (
	"errors"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/state"
)

// An operator resolving an unknown record with a message id that another
// live record of the same upstream already holds would re-point the
// receipt index at the wrong record (and the receipts of one account to
// another's ESME): refused, naming the record that holds the id.
func TestResolveRefusesAMessageIDAnotherRecordHolds(t *testing.T) {
	f := &fakeForwarder{answer: firstThen(Result{Kind: Answered, Status: 0, MessageID: "smsc-1"}, Result{Kind: Ambiguous})}
	e, st, _ := newEngine(t, f)
	e.Submit(ctx, "bank", Policy{}, submit(t, "otp-9", "x"))
	e.Submit(ctx, "shop", Policy{}, submit(t, "lost-1", "y"))
	lost := state.Key{Account: "shop", Key: KeyOfTLV([]byte("lost-1"))}

	_, err := e.ResolveAccepted(ctx, lost, "smsc-1", "op")
	if !errors.Is(err, ErrMessageIDHeld) {
		t.Fatalf("Resolve with an id another record holds = %v, want ErrMessageIDHeld", err)
	}
	for _, want := range []string{`"smsc-1"`, `account "bank"`, `key "otp-9"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if r, _ := st.Get(ctx, lost); r == nil || r.State != state.Unknown || r.MessageID != "" {
		t.Errorf("record after the refused resolve = %+v, want unknown without a message id", r)
	}
	if r, err := st.ByMessageID(ctx, "up", "smsc-1"); err != nil || r.Key.Account != "bank" {
		t.Errorf("ByMessageID(smsc-1) = %+v, %v; want the bank record still", r, err)
	}
	// The record's own id, or a free one, is accepted.
	if r, err := e.ResolveAccepted(ctx, lost, "smsc-2", "op"); err != nil || r.State != state.Accepted {
		t.Errorf("Resolve with a free id = %+v, %v", r, err)
	}
}
