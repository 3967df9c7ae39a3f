package dlr

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
)

func TestReconfiguredAccountGetsItsReceiptsAndMO(t *testing.T) {
	e := newEnv(t, nil)
	// "new" is not configured yet: its MO has no route.
	mo := moFrame("447000111")
	if st := e.deliver(t, mo); st != smpp.StatusInvDstAdr {
		t.Fatalf("MO for an account not configured yet = %v, want ESME_RINVDSTADR", st)
	}
	err := e.svc.Reconfigure(map[string]Account{
		"shop": {Redelivery: 200 * time.Millisecond, Route: []string{"smsc"}},
		"new":  {Redelivery: 200 * time.Millisecond, Route: []string{"smsc"}},
	}, []MORoute{{Prefix: "447000", Account: "new"}}, "", e.svc.upstreams())
	if err != nil {
		t.Fatal(err)
	}
	if st := e.deliver(t, mo); st != smpp.StatusOK {
		t.Fatalf("MO routed to the added account = %v, want 0", st)
	}
	rec := e.accepted(t, "new", "k-new", "3ea")
	if st := e.deliver(t, dlrFrame("1002", "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("receipt for the added account = %v, want 0", st)
	}
	rx := &fakeRx{id: "n1"}
	e.rcv.bind("new", rx)
	e.svc.kick("new")
	waitFor(t, "the added account's MO and receipt delivered", func() bool { return len(rx.received()) == 2 })
	if got := rx.received(); got[0] != "STOP" || got[1] != rec.ClientMessageID() {
		t.Errorf("added account got %v, want the MO then receipt id %q", got, rec.ClientMessageID())
	}
}

func TestReconfigureRefusesAnMORouteToNoAccount(t *testing.T) {
	e := newEnv(t, nil)
	err := e.svc.Reconfigure(map[string]Account{"shop": {}}, []MORoute{{Prefix: "44", Account: "gone"}}, "", nil)
	if err == nil {
		t.Fatal("Reconfigure accepted an MO route to an account it does not have")
	}
	// Nothing changed: bank is still served.
	if _, ok := e.svc.pol.Load().accounts["bank"]; !ok {
		t.Error("a refused Reconfigure replaced the accounts in force")
	}
}

// moFrame is an MO deliver_sm from 447700900123 to dst.
func moFrame(dst string) []byte {
	b := smpptest.EncodeSubmit(1, smpptest.SubmitFields{Src: "447700900123", Dst: dst, ShortMessage: []byte("STOP")})
	smpp.PutHeader(b, smpp.Header{Length: uint32(len(b)), ID: smpp.CmdDeliverSM, Sequence: 1})
	return b
}
