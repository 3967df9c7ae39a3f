package state_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// benchRecord is a realistic fresh record: the first write of a submit.
func benchRecord(i uint64) *state.Record {
	now := time.Now()
	k := state.Key{Account: "acme", Key: fmt.Sprintf("otp-%016x", i)}
	return &state.Record{
		Key: k, Fingerprint: sha256.Sum256([]byte(k.Key)), State: state.Sent, Owner: "proxy-1/42",
		Created: now, Updated: now, Expires: now.Add(72 * time.Hour),
		History: []state.Event{{At: now, State: state.Sent}},
	}
}

func benchCreate(b *testing.B, s state.Store, parallelism int) {
	var next atomic.Uint64
	ctx := context.Background()
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, created, err := s.Create(ctx, benchRecord(next.Add(1))); err != nil || !created {
				b.Errorf("Create = %v, %v", created, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
}

// Durable creates on real disk, 64 writers per CPU: the group-commit path.
func BenchmarkBadgerCreateParallel(b *testing.B) {
	s, err := state.OpenBadger(state.BadgerOptions{Path: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchCreate(b, s, 64)
	st := s.Stats()
	if st.Commits > 0 {
		b.ReportMetric(float64(st.Ops)/float64(st.Commits), "ops/commit")
	}
}

// One writer at a time: every create pays a whole fsync.
func BenchmarkBadgerCreateSerial(b *testing.B) {
	s, err := state.OpenBadger(state.BadgerOptions{Path: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	for i := range b.N {
		if _, _, err := s.Create(ctx, benchRecord(uint64(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
}

func BenchmarkMemCreate(b *testing.B) {
	benchCreate(b, state.NewMem(nil), 64)
}
