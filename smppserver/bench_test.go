package smppserver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	esmeclient "github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

// benchWindow is how many submits the benchmark clients keep in flight.
const benchWindow = 100

// pipelineSubmits sends b.N submits on c, benchWindow at a time, and fails
// the benchmark on any error or refused submit.
func pipelineSubmits(b *testing.B, c *esmeclient.Client) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range benchWindow {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				r, err := c.Submit(ctx, esmeclient.Submit{Src: "src", Dst: "4915112345678", Text: []byte("your code is 123456")})
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
}

// BenchmarkServerSubmitRoundTrip: an ESME keeps 100 submits in flight over
// loopback to a handler that answers each at once. allocs/op counts both
// ends (the client runs in the same process).
func BenchmarkServerSubmitRoundTrip(b *testing.B) {
	srv := newTestServer(HandlerFunc(func(_ context.Context, w ResponseWriter, r *Request) {
		_ = w.WriteFrame(smpp.SubmitResp(smpp.StatusOK, r.Header.Sequence, "0123456789abcdef"))
	}))
	// A slot is freed just after the response is queued: room for the
	// client to reuse its slot first.
	srv.Window = 2 * benchWindow
	addr := RunLocalServer(b, srv)
	c, err := esmeclient.Dial(context.Background(), addr, esmeclient.Options{SystemID: "shop", Password: password, Bind: smpp.BindTransmitter, Window: benchWindow})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	pipelineSubmits(b, c)
}
