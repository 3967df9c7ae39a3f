package dedup

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// BenchmarkFinalsMemory fills the engine's memory of settled answers
// (finalsCap records it settled, readsCap it read) with records shaped
// like a submit's (ids, upstream, session, owner, history) and reports
// the heap it holds per record remembered (heap-B/record, not counting
// the strings of the keys, which the benchmark holds), and the cost of a
// hit (a retry answered from it).
//
//	go test -run x -bench FinalsMemory -benchtime 1x ./dedup/
func BenchmarkFinalsMemory(b *testing.B) {
	now := time.Now()
	mk := func(i int) *state.Record {
		return &state.Record{
			Key:         state.Key{Account: "shop", Key: fmt.Sprintf("otp-%012d", i)},
			Fingerprint: [32]byte{byte(i), byte(i >> 8), 1}, FingerprintVersion: state.FingerprintHMAC,
			State: state.Accepted, Owner: fmt.Sprintf("host-%d", i%4), Upstream: "smsc",
			Session: fmt.Sprintf("smsc/%d", i%4), Sequence: uint32(i),
			MessageID: fmt.Sprintf("%016x", i), NormID: fmt.Sprintf("%016X", i),
			ProxyID: fmt.Sprintf("p%015x", i), Created: now, Updated: now, Expires: now.Add(72 * time.Hour),
			Attempts: 1, History: []state.Event{{At: now, State: state.Sent, Note: "created"}, {At: now, State: state.Accepted}},
		}
	}
	n := finalsCap + readsCap
	recs := make([]*state.Record, n)
	for i := range recs {
		recs[i] = mk(i)
	}
	f := newFinals(finalsCap)
	for i, r := range recs {
		if i < finalsCap {
			f.put(r)
		} else {
			f.learn(r)
		}
	}
	keys := make([]state.Key, n)
	for i, r := range recs {
		keys[i] = r.Key
	}
	recs = nil // what the engine held of the records is gone once answered
	var r state.Record
	b.ResetTimer()
	for i := range b.N {
		if !f.get(keys[i%n], &r) {
			b.Fatal("a remembered record was not found")
		}
	}
	b.StopTimer()
	// What f alone holds: the heap with it, less the heap without it.
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	runtime.KeepAlive(f)
	f = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	runtime.KeepAlive(keys)
	b.ReportMetric(float64(with.HeapAlloc-without.HeapAlloc)/float64(n), "heap-B/record")
}
