package smppserver

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	esmeclient "github.com/smppproxy/smppproxy/internal/peer/esme"
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

// countingListener counts the Write calls on the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingWrites{Conn: c, n: &l.writes}, nil
}

type countingWrites struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingWrites) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
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
	l, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		b.Fatal(lerr)
	}
	cl := &countingListener{Listener: l}
	go func() { _ = srv.Serve(cl) }()
	defer func() { _ = srv.Close() }()
	addr := l.Addr().String()
	c, err := esmeclient.Dial(context.Background(), addr, esmeclient.Options{SystemID: "shop", Password: password, Bind: smpp.BindTransmitter, Window: benchWindow})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	before := cl.writes.Load()
	pipelineSubmits(b, c)
	b.ReportMetric(float64(cl.writes.Load()-before)/float64(b.N), "writes/op")
}
