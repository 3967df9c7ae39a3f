package smppclient

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/sim"
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
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range window {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				r, err := p.Submit(ctx, "", submitFrame, nil)
				if err != nil || r.Status != smpp.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d submits failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
	b.ReportMetric(float64(conns[0].writes.Load()-writes)/float64(b.N), "writes/op")
}
