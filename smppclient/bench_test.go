package smppclient

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// BenchmarkPoolSubmit: 100 callers submit through a pool of one session
// (window 100) to the SMSC simulator over loopback. allocs/op counts the
// simulator too (same process).
func BenchmarkPoolSubmit(b *testing.B) {
	s, err := sim.Start("127.0.0.1:0", sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const window = 100
	var conns []*countingConn
	p := New(Config{
		Name: "up", Address: s.Addr(), SystemID: "sys", InstanceID: "bench",
		Logger: slog.New(slog.DiscardHandler),
		Window: window, ResponseTimeout: 10 * time.Second, RouteWait: 10 * time.Second, EnquireLink: time.Minute,
	})
	p.wrapConn = func(c net.Conn) net.Conn {
		cc := &countingConn{Conn: c}
		conns = append(conns, cc)
		return cc
	}
	p.Start()
	defer func() { _ = p.Close(context.Background()) }()
	ctx := context.Background()
	if _, err := p.Submit(ctx, "", submitFrame, nil); err != nil { // waits for the bind
		b.Fatal(err)
	}
	writes := conns[0].writes.Load()
	var failed atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, window/runtime.GOMAXPROCS(0))) // about window callers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, err := p.Submit(ctx, "", submitFrame, nil); err != nil || r.Status != smpp.StatusOK {
				failed.Add(1)
			}
		}
	})
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d submits failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
	b.ReportMetric(float64(conns[0].writes.Load()-writes)/float64(b.N), "writes/op")
}
