package dlr

import (
	"strconv"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// An upstream that gives a new message an id it gave an earlier one (its
// counter restarted, its id space is small) sends the new message a
// receipt of the same id and state as the earlier one's: it is that
// message's receipt, answered 0 upstream, so it must reach the ESME, not
// be dropped as a duplicate of the earlier receipt; the same receipt of
// the new message again still is one.
func TestAReceiptOfAMessageWhoseUpstreamIDWasReusedIsDelivered(t *testing.T) {
	e := newEnv(t, nil)
	e.accepted(t, "bank", "k1", "3e8")
	if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != smpp.StatusOK {
		t.Fatalf("OnDeliver of the first message's receipt = %v, want 0", st)
	}
	rx := &fakeRx{id: "b1"}
	e.rcv.bind("bank", rx)
	e.svc.kick("bank")
	waitFor(t, "the first receipt delivered", func() bool { return len(rx.received()) == 1 })

	second := e.accepted(t, "bank", "k2", "3e8")
	for i := range 2 {
		if st := e.deliver(t, dlrFrame("1000", "DELIVRD")); st != smpp.StatusOK {
			t.Fatalf("OnDeliver of the second message's receipt (%d) = %v, want 0", i+1, st)
		}
	}
	if got := e.svc.Count(OutDuplicate); got != 1 {
		t.Errorf("Count(duplicate) = %d, want 1 (the second message's receipt sent twice), not its first", got)
	}
	e.svc.kick("bank")
	waitFor(t, "the second message's receipt delivered", func() bool { return len(rx.received()) == 2 })
	if got := rx.received(); got[1] != second.ProxyID {
		t.Errorf("second receipt delivered with id %q, want the second message's %q", got[1], second.ProxyID)
	}
}

// Receipts that match no record yet are told apart by their submit date
// too: two of one reused id and state for messages submitted at different
// times are both kept; the same one twice is kept once.
func TestUnmatchedReceiptsOfAReusedIDAreToldApartBySubmitDate(t *testing.T) {
	e := newEnv(t, nil)
	at := func(submitted string) []byte {
		return receiptFrame("id:255 sub:001 dlvrd:001 submit date:" + submitted + " done date:2612061200 stat:DELIVRD err:000 text:")
	}
	for _, f := range [][]byte{at("2612051000"), at("2612061100"), at("2612061100")} {
		if st := e.deliver(t, f); st != smpp.StatusOK {
			t.Fatalf("OnDeliver = %v, want 0", st)
		}
	}
	if e.svc.Count(OutUnmatched) != 2 || e.svc.Count(OutDuplicate) != 1 {
		t.Errorf("unmatched %d, duplicate %d; want 2 (two messages) and 1 (the second again)", e.svc.Count(OutUnmatched), e.svc.Count(OutDuplicate))
	}
}

// A record renewed past its fingerprint window is archived under another
// key, and its receipts then match the archive: the same receipt sent
// again after that is still a duplicate of the one queued before (from a
// review: the record's key in the dedup key made it a new receipt).
func TestTheSameReceiptAfterItsRecordWasRenewedIsADuplicate(t *testing.T) {
	e := newEnv(t, nil)
	old := e.accepted(t, "bank", "k1", "3e8")
	frame := dlrFrame("1000", "DELIVRD")
	if st := e.deliver(t, frame); st != smpp.StatusOK {
		t.Fatalf("OnDeliver = %v, want 0", st)
	}
	cur, err := e.st.Get(bg, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	arch := cur.Clone() // as the engine archives a record past its window
	arch.Key.Key = cur.Key.Key + "@" + strconv.FormatInt(cur.Created.UnixNano(), 36)
	arch.Owner = "archived"
	if _, _, err := e.st.Create(bg, arch); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := e.st.Update(bg, old.Key, func(r *state.Record) error {
		*r = state.Record{Key: old.Key, State: state.Sent, Owner: "me", Created: now, Updated: now, Expires: now.Add(time.Hour)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st := e.deliver(t, frame); st != smpp.StatusOK {
		t.Fatalf("OnDeliver of the same receipt again = %v, want 0", st)
	}
	if got, n := e.svc.Count(OutDuplicate), len(queued(t, e.st, accountQueue("bank"))); got != 1 || n != 1 {
		t.Errorf("Count(duplicate) = %d with %d queued; want 1 and 1", got, n)
	}
}
