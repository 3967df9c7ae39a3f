package pgstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// BenchmarkCreateReplaceParallel measures durable submits: each is the
// Create of a fresh record (sent, journaled, with a proxy id) and the
// Replace of its outcome (accepted with a message id), from many
// concurrent callers sharing the group commit. Reported: submits/s and
// the write requests per committed batch.
func BenchmarkCreateReplaceParallel(b *testing.B) {
	s := openTest(b, Options{})
	var n atomic.Uint64
	now := time.Now()
	b.SetParallelism(512)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			rec := &state.Record{
				Key:   state.Key{Account: "acme", Key: fmt.Sprintf("bench-%d", i)},
				State: state.Sent, Owner: fmt.Sprintf("test-1/%d", i),
				Upstream: "smsc", Session: "smsc/1", Sequence: uint32(i), ProxyID: fmt.Sprintf("p-%d", i),
				AddrHash: state.HashAddrs([]byte("SHOP"), []byte("447700900123")),
				Created:  now, Updated: now, Expires: now.Add(time.Hour),
				History: []state.Event{{At: now, State: state.Sent, Session: "smsc/1", Sequence: uint32(i)}},
			}
			if err := createAndAccept(s, rec, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "submits/s")
	batches, ops, busy := s.CommitStats()
	if batches > 0 {
		b.ReportMetric(float64(ops)/float64(batches), "ops/batch")
		b.ReportMetric(float64(busy.Milliseconds())/float64(batches), "ms/batch")
	}
}

// BenchmarkUpdateParallel measures durable Updates (a receipt's delivery
// state) of distinct records from many concurrent callers.
func BenchmarkUpdateParallel(b *testing.B) {
	s := openTest(b, Options{})
	now := time.Now()
	const keys = 4096
	for i := range keys {
		rec := &state.Record{Key: state.Key{Account: "acme", Key: fmt.Sprintf("u-%d", i)}, State: state.Accepted,
			Owner: "test-1/1", Created: now, Updated: now, Expires: now.Add(time.Hour)}
		if _, _, err := s.Create(bg, rec); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Uint64
	b.SetParallelism(256)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := state.Key{Account: "acme", Key: fmt.Sprintf("u-%d", n.Add(1)%keys)}
			if _, err := s.Update(bg, k, func(r *state.Record) error {
				r.Delivery, r.DeliveryAt = state.DeliveryDelivered, now
				r.History = append(r.History, state.Event{At: now, State: r.State, Note: "receipt"})
				return nil
			}); err != nil {
				b.Errorf("Update = %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "updates/s")
}

// BenchmarkReceiptIntakeParallel measures the store's part of a receipt's
// intake from many concurrent callers: the record found by message id,
// the receipt queued for its account and the record marked delivered —
// as one write (ByMessageIDHot, EnqueueAppend) and, for comparison, as
// the two writes it costs a store without EnqueueAppend (ByMessageID,
// Enqueue, Update). Reported: receipts/s and write requests per batch.
func BenchmarkReceiptIntakeParallel(b *testing.B) {
	for _, oneWrite := range []bool{true, false} {
		name := "one-write"
		if !oneWrite {
			name = "two-writes"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b, Options{})
			now := time.Now()
			const keys = 4096
			for i := range keys {
				rec := &state.Record{Key: state.Key{Account: "acme", Key: fmt.Sprintf("r-%d", i)}, State: state.Accepted,
					Owner: "test-1/1", Upstream: "smsc", MessageID: fmt.Sprintf("m-%d", i), Created: now, Updated: now,
					Expires: now.Add(time.Hour), History: []state.Event{{At: now, State: state.Sent}, {At: now, State: state.Accepted}}}
				if _, _, err := s.Create(bg, rec); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Uint64
			b.SetParallelism(128)
			batches0, ops0, _ := s.CommitStats()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if err := benchReceipt(s, oneWrite, fmt.Sprintf("m-%d", i%keys), fmt.Sprint("d-", i), now); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "receipts/s")
			if batches, ops, _ := s.CommitStats(); batches > batches0 {
				b.ReportMetric(float64(ops-ops0)/float64(batches-batches0), "ops/batch")
			}
		})
	}
}

func benchReceipt(s *Store, oneWrite bool, id, dedup string, now time.Time) error {
	find := s.ByMessageID
	if oneWrite {
		find = s.ByMessageIDHot
	}
	rec, err := find(bg, "smsc", id)
	if err != nil {
		return err
	}
	e := &state.QueueEntry{Queue: "esme/acme", DedupKey: dedup, Kind: "receipt", Upstream: "smsc", MessageID: id,
		Stat: "DELIVRD", Command: 5, Body: []byte("id:" + id + " stat:DELIVRD"), Enqueued: now, Expires: now.Add(time.Hour)}
	mark := func(r *state.Record) error {
		r.Delivery, r.DeliveryAt = state.DeliveryDelivered, now
		r.History = append(r.History, state.Event{At: now, State: r.State, Note: "receipt"})
		return nil
	}
	if oneWrite {
		_, _, appended, err := s.EnqueueAppend(bg, e, rec.Key, mark)
		if err != nil || appended {
			return err
		}
		return s.AppendHot(bg, rec.Key, mark)
	}
	if _, _, err := s.Enqueue(bg, e); err != nil {
		return err
	}
	_, err = s.Update(bg, rec.Key, mark)
	return err
}
