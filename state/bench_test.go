package state_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// benchRecord is a realistic fresh record: the first write of a submit
// (created with its journal, proxy id and addresses).
func benchRecord(i uint64) *state.Record {
	now := time.Now()
	k := state.Key{Account: "acme", Key: fmt.Sprintf("otp-%016x", i)}
	return &state.Record{
		Key: k, Fingerprint: sha256.Sum256([]byte(k.Key)), FingerprintVersion: state.FingerprintHMAC,
		State: state.Sent, Owner: "proxy-1/42", Attempts: 1,
		Upstream: "smsc-a", Session: "smsc-a/1", Sequence: uint32(i),
		ProxyID:  fmt.Sprintf("p-%016x", i),
		AddrHash: state.HashAddrs([]byte("SHOP"), []byte(k.Key)),
		Created:  now, Updated: now, Expires: now.Add(72 * time.Hour),
		History: []state.Event{{At: now, State: state.Sent, Session: "smsc-a/1", Sequence: uint32(i),
			Note: "created; forwarded to smsc-a on session smsc-a/1"}},
	}
}

// benchOutcome turns rec into its outcome (accepted), as dedup does.
func benchOutcome(r *state.Record, i uint64) {
	now := time.Now()
	r.State, r.MessageID, r.Updated = state.Accepted, fmt.Sprintf("%x", i), now
	r.Expires = r.Created.Add(72 * time.Hour)
	r.History = append(r.History, state.Event{At: now, State: state.Accepted, Session: r.Session, Sequence: r.Sequence,
		MessageID: r.MessageID, Note: "submit_sm_resp from smsc-a: accepted"})
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

// benchSubmits runs b.N submits, each a Create and its outcome (by
// Replace, or by Update when update is set), from goroutines many
// goroutines at once; it reports submits/s and writes/s.
func benchSubmits(b *testing.B, s state.Store, goroutines int, update bool) {
	var next atomic.Uint64
	ctx := context.Background()
	b.SetParallelism(max(1, goroutines/testingProcs()))
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			rec := benchRecord(i)
			if _, created, err := s.Create(ctx, rec.Clone()); err != nil || !created {
				b.Errorf("Create = %v, %v", created, err)
				return
			}
			var err error
			if update {
				_, err = s.Update(ctx, rec.Key, func(r *state.Record) error { benchOutcome(r, i); return nil })
			} else {
				out := rec.Clone()
				benchOutcome(out, i)
				err = s.Replace(ctx, rec, out)
			}
			if err != nil {
				b.Errorf("outcome = %v", err)
				return
			}
		}
	})
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/secs, "submits/s")
	b.ReportMetric(float64(2*b.N)/secs, "writes/s")
	reportCPU(b, cpu0, 2*b.N)
}

func reportCommits(b *testing.B, s *state.BadgerStore) {
	st := s.Stats()
	if st.Commits > 0 {
		b.ReportMetric(float64(st.Ops)/float64(st.Commits), "ops/commit")
	}
}

func openBench(b *testing.B) *state.BadgerStore {
	return openBenchWith(b, state.BadgerOptions{})
}

func openBenchWith(b *testing.B, opts state.BadgerOptions) *state.BadgerStore {
	opts.Path, opts.GCInterval = b.TempDir(), -1
	s, err := state.OpenBadger(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// Durable creates on real disk, 64 writers per CPU: the group-commit path.
func BenchmarkBadgerCreateParallel(b *testing.B) {
	s := openBench(b)
	benchCreate(b, s, 64)
	reportCommits(b, s)
}

// The submit shape: Create with the journal, then the outcome by Replace
// (or by Update, the read-modify-write), 64 to 256 submits at once.
func BenchmarkBadgerSubmits(b *testing.B) {
	for _, g := range []int{64, 256} {
		for _, how := range []string{"replace", "update"} {
			b.Run(fmt.Sprintf("%s/g%d", how, g), func(b *testing.B) {
				s := openBench(b)
				benchSubmits(b, s, g, how == "update")
				reportCommits(b, s)
			})
		}
	}
}

// The submit shape with the store's commit log (default) and without it
// (NoCommitLog: Badger syncs its own memtable log per commit), side by
// side: the before/after of the commit log in one run.
func BenchmarkBadgerSubmitsCommitLog(b *testing.B) {
	for _, g := range []int{64, 256} {
		for _, wal := range []string{"badger", "log"} {
			b.Run(fmt.Sprintf("%s/g%d", wal, g), func(b *testing.B) {
				s := openBenchWith(b, state.BadgerOptions{NoCommitLog: wal == "badger"})
				benchSubmits(b, s, g, false)
				reportCommits(b, s)
			})
		}
	}
}

// One writer at a time: every create pays a whole sync.
func BenchmarkBadgerCreateSerial(b *testing.B) {
	for _, wal := range []string{"badger", "log"} {
		b.Run(wal, func(b *testing.B) {
			benchCreateSerial(b, openBenchWith(b, state.BadgerOptions{NoCommitLog: wal == "badger"}))
		})
	}
}

func benchCreateSerial(b *testing.B, s *state.BadgerStore) {
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

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// scanOnly hides a store's own count by state: the metrics then scan it.
type scanOnly struct{ state.Store }

// BenchmarkRecordsByState measures the periodic count of records by state
// behind smppproxy_store_records over a Badger store of 100,000 submits
// (created, then accepted): "scan" decodes every record as the metrics
// did, "count" reads each one's state and expiry alone (CountStates).
// Reported per record: ns and bytes allocated.
func BenchmarkRecordsByState(b *testing.B) {
	s := openBenchWith(b, state.BadgerOptions{MinFreeBytes: -1})
	const n = 100_000
	fillParallel(b, n, func(i uint64) error {
		r := benchRecord(i)
		if _, _, err := s.Create(context.Background(), r.Clone()); err != nil {
			return err
		}
		out := r.Clone()
		benchOutcome(out, i)
		return s.Replace(context.Background(), r, out)
	})
	for _, tc := range []struct {
		name  string
		store state.Store
	}{{"scan", scanOnly{s}}, {"count", s}} {
		b.Run(tc.name, func(b *testing.B) {
			m := state.NewMetrics(tc.store)
			b.ReportAllocs()
			for b.Loop() {
				if err := m.RefreshRecords(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
		})
	}
}

// BenchmarkQueueDepths measures the periodic count of queue depths over a
// Badger store holding 100,000 queued receipts (an ESME that receives
// nothing for a while), in 4 queues. Reported per entry: ns and bytes.
func BenchmarkQueueDepths(b *testing.B) {
	s := openBenchWith(b, state.BadgerOptions{MinFreeBytes: -1})
	const n = 100_000
	now := time.Now()
	fillParallel(b, n, func(i uint64) error {
		e := &state.QueueEntry{Queue: fmt.Sprint("account-", i%4), DedupKey: fmt.Sprint("smsc\x00", i, "\x00DELIVRD"),
			Kind: "receipt", Upstream: "smsc", MessageID: fmt.Sprint(i), Stat: "DELIVRD", Command: 5,
			Body: make([]byte, 160), Enqueued: now, Expires: now.Add(72 * time.Hour)}
		_, _, err := s.Enqueue(context.Background(), e)
		return err
	})
	b.ReportAllocs()
	for b.Loop() {
		d, err := s.Depths(context.Background())
		if err != nil || len(d) != 4 {
			b.Fatalf("Depths = %v, %v", d, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/entry")
}

// fillParallel calls fill(1) to fill(n) from 64 goroutines (so that the
// store's group commits carry many writes) and fails b on an error.
func fillParallel(b *testing.B, n uint64, fill func(i uint64) error) {
	b.Helper()
	var next atomic.Uint64
	done := make(chan error)
	for range 64 {
		go func() {
			for {
				i := next.Add(1)
				if i > n {
					done <- nil
					return
				}
				if err := fill(i); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	for range 64 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
