package pgstore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// BenchmarkFreshSubmitParallel measures what a proxy asks of the store
// per fresh submit: the read of its key (not found), the Create of its
// record and the Replace of its outcome, from as many concurrent callers
// as `bench --processes` keeps in flight (4 binds x window 100).
// Reported: submits/s.
func BenchmarkFreshSubmitParallel(b *testing.B) {
	s := openTest(b, Options{MaxConns: 16})
	var n atomic.Uint64
	now := time.Now()
	b.SetParallelism(200) // x GOMAXPROCS
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			rec := sentRecord(now, fmt.Sprintf("fresh-%d", i), fmt.Sprintf("test-1/%d", i), uint32(i))
			if _, err := s.Get(bg, rec.Key); !errors.Is(err, state.ErrNotFound) {
				b.Errorf("Get of a fresh key = %v", err)
				return
			}
			if err := createAndAccept(s, rec, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
	batches, ops, busy := s.CommitStats()
	if batches > 0 {
		b.ReportMetric(float64(ops)/float64(batches), "ops/batch")
		b.ReportMetric(float64(busy.Milliseconds())/float64(batches), "ms/batch")
	}
}

// createAndAccept is what a fresh submit writes: its record created, then
// replaced by its outcome (accepted with a message id).
func createAndAccept(s *Store, rec *state.Record, now time.Time) error {
	if _, created, err := s.Create(bg, rec); err != nil || !created {
		return fmt.Errorf("Create = %v, %v", created, err)
	}
	out := rec.Clone()
	out.State, out.MessageID = state.Accepted, "m-"+rec.Key.Key
	out.History = append(out.History, state.Event{At: now, State: state.Accepted, MessageID: out.MessageID})
	if err := s.Replace(bg, rec, out); err != nil {
		return fmt.Errorf("Replace = %v", err)
	}
	return nil
}
