package sim

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

// BenchmarkSimSubmit: one ESME keeps 100 submits in flight to the
// simulator over loopback (what `smppproxy bench` does straight to a sim).
// allocs/op counts both ends.
func BenchmarkSimSubmit(b *testing.B) {
	s, err := Start("127.0.0.1:0", Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const window = 100
	ctx := context.Background()
	c, err := esme.Dial(ctx, s.Addr(), esme.Options{Bind: smpp.BindTransmitter, Window: window})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var failed, seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, window/runtime.GOMAXPROCS(0))) // about window senders
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "k" + string(rune('a'+seq.Add(1)%26))
			r, err := c.Submit(ctx, esme.Submit{Src: "src", Dst: "4915112345678", Text: []byte("your code is 123456"), Key: key})
			if err != nil || r.Status != smpp.StatusOK {
				failed.Add(1)
			}
		}
	})
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d submits failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}
