package dlr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// On a Badger store the intake reads the record without its history and
// appends the receipt's event without reading it, in the write that
// queues the receipt: the record still gets its delivery state, its
// history keeps every event before the receipt's, a duplicate adds none,
// and the receipt reaches the ESME once and leaves the queue (its Ack
// written in a batch).
func TestReceiptOnBadgerKeepsTheRecordsWholeHistory(t *testing.T) {
	st, err := state.OpenBadger(state.BadgerOptions{Path: t.TempDir(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rcv := &fakeRcv{}
	svc, err := New(Config{
		Store: st, IDs: testIDs, Receivers: rcv,
		Accounts:  map[string]Account{"shop": {Redelivery: time.Minute, Route: []string{"smsc"}}},
		Upstreams: map[string]Upstream{"smsc": {}}, BindSettle: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	defer svc.Close()

	now := time.Now()
	k := state.Key{Account: "shop", Key: "k1"}
	rec := &state.Record{Key: k, State: state.Sent, Created: now, Updated: now, Expires: now.Add(time.Hour),
		History: []state.Event{{At: now, State: state.Sent, Note: "written"}}}
	if _, _, err := st.Create(bg, rec); err != nil {
		t.Fatal(err)
	}
	for _, note := range []string{"answered", "noted"} {
		if _, err := st.Update(bg, k, func(r *state.Record) error {
			r.State, r.Upstream, r.MessageID, r.NormID = state.Accepted, "smsc", "3e8", testIDs.NormalizeID("smsc", "3e8")
			r.History = append(r.History, state.Event{At: now, State: state.Accepted, Note: note})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second time a duplicate: neither queued nor noted again
		if got := svc.OnDeliver(bg, smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: dlrFrame("1000", "DELIVRD")}); got != 0 {
			t.Fatalf("receipt answered %v", got)
		}
	}
	if n := svc.Count(OutDuplicate); n != 1 {
		t.Errorf("%d receipts counted duplicate; want 1", n)
	}
	got, err := st.Get(bg, k)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, ev := range got.History {
		notes = append(notes, ev.Note)
	}
	if got.Delivery != state.DeliveryDelivered || len(notes) != 4 || fmt.Sprint(notes[:3]) != "[written answered noted]" ||
		!strings.HasPrefix(notes[3], "receipt from smsc: delivered") {
		t.Errorf("record after the receipt: delivery %q, history %+v; want delivered, the 3 events then the receipt's", got.Delivery, got.History)
	}
	rx := &fakeRx{id: "s1"}
	rcv.bind("shop", rx)
	svc.kick("shop")
	waitFor(t, "receipt delivered and acknowledged", func() bool {
		es, _ := st.List(bg, accountQueue("shop"), 0, 10)
		return len(rx.received()) == 1 && len(es) == 0
	})
}

// batchAckFailingQueue is ackFailingQueue with AckAll (a batchAcker),
// refused too while fail is set.
type batchAckFailingQueue struct {
	ackFailingQueue
	batches atomic.Int32 // AckAll calls that were written
}

func (q *batchAckFailingQueue) wrap(c *Config) { q.Queue = c.Store.(state.Queue); c.Queue = q }

func (q *batchAckFailingQueue) AckAll(ctx context.Context, queue string, seqs []uint64) error {
	if q.fail.Load() {
		q.refused.Add(1)
		return errors.New("disk full")
	}
	for _, seq := range seqs {
		if err := q.Queue.Ack(ctx, queue, seq); err != nil {
			return err
		}
	}
	q.batches.Add(1)
	return nil
}

// Acks written together (AckAll) that the store refuses are retried, each
// on its own, and none of the receipts they acknowledge is sent again.
func TestBatchedAcksRefusedAreRetriedNotSentAgain(t *testing.T) {
	fq := &batchAckFailingQueue{}
	e := newEnv(t, fq.wrap)
	want := queueReceipts(t, e, 5)
	fq.fail.Store(true)
	rx := &fakeRx{id: "s1"}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "every receipt answered and its Ack refused", func() bool {
		return len(rx.received()) == 5 && e.svc.Count(DelAckFailed) == 5
	})
	fq.fail.Store(false)
	waitFor(t, "queue empty", queueEmpty(e))
	if got := rx.received(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ESME received %v; want %v, each once", got, want)
	}
	d := e.svc.accounts["shop"]
	d.mu.Lock()
	held := len(d.seqsLocked(entryAckPending))
	d.mu.Unlock()
	if held != 0 {
		t.Errorf("%d Acks still pending after the store recovered", held)
	}
}
