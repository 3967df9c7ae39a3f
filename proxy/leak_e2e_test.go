package proxy

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// 500 concurrent ESME sessions bind, submit and unbind;
// afterwards the process's goroutines return to their baseline and its
// heap to near it.
//
// Tolerances: goroutines ≤ baseline + 5 (polled for up to 10s: sessions
// end asynchronously after unbind_resp is flushed); heap (HeapAlloc after
// two GCs) ≤ baseline + 16 MiB — 500 sessions' buffers, handlers and
// client state are well above that if they are retained (each session has
// two 16 KiB client buffers alone, 16 MiB in all), while Badger's own
// caches stay under it.
func TestFiveHundredSessionsLeaveNothingBehind(t *testing.T) {
	const sessions = 500
	smsc, cfg := simConfig(t, sim.Config{})
	cfg.Accounts[0].MaxBinds = sessions
	cfg.Listen.MaxConnectionsPerIP = sessions // every client is on 127.0.0.1
	// Leaks are measured here, not latency: 500 concurrent binds and
	// submits under -race on a loaded machine can take longer than
	// testConfig's bind_timeout (2s), response_timeout (500ms) and
	// route_wait (2s).
	cfg.Listen.BindTimeout = config.Duration(30 * time.Second)
	cfg.Upstreams[0].ResponseTimeout = config.Duration(10 * time.Second)
	cfg.Upstreams[0].RouteWait = config.Duration(10 * time.Second)
	cfg.Upstreams[0].Window = 100
	app := startProxy(t, cfg)

	// Warm up every path once (store, pools, server) so lazily started
	// goroutines and caches are part of the baseline.
	run := func(i int) error {
		c, err := esme.Dial(t.Context(), app.Addr(), esme.Options{SystemID: "shop", Password: "secret", Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("leak-%d", i), Text: []byte("hello")})
		if err != nil {
			return err
		}
		if r.Status != smpp.StatusOK {
			return fmt.Errorf("submit status %v", r.Status)
		}
		return c.Unbind(t.Context())
	}
	for i := range 5 {
		if err := run(-1 - i); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	heapAlloc := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	waitFor(t, 10*time.Second, "the warm-up sessions to end", func() bool {
		return len(app.server.Sessions()) == 0
	})
	baseG, baseHeap := testkit.CountGoroutines(), heapAlloc()

	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	var peakSessions atomic.Int64
	ready := make(chan struct{})
	for i := range sessions {
		wg.Go(func() {
			<-ready
			if err := run(i); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error()) // one type: errors differ in type
			}
			peakSessions.Store(max(peakSessions.Load(), int64(len(app.server.Sessions()))))
		})
	}
	close(ready)
	wg.Wait()
	ran := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d sessions failed, first: %v; connections refused %v, sessions closed %v", n, sessions, firstErr.Load(), app.server.RefusedCounts(), app.server.ClosedCounts())
	}
	if got := smsc.Total(); got != sessions+5 {
		t.Errorf("SMSC received %d submits, want %d", got, sessions+5)
	}

	g, settled := baseG.Settle(10*time.Second, 5)
	heap := heapAlloc()
	t.Logf("%d sessions in %v (up to %d at once); goroutines %d → %d; heap %d KiB → %d KiB",
		sessions, ran.Round(time.Millisecond), peakSessions.Load(), baseG.Count(), g, baseHeap>>10, heap>>10)
	if !settled {
		t.Errorf("goroutines = %d after the sessions ended, baseline %d; stacks:\n%s", g, baseG.Count(), testkit.Stacks())
	}
	if heap > baseHeap+16<<20 {
		t.Errorf("heap = %d KiB after the sessions ended, baseline %d KiB, want within 16 MiB", heap>>10, baseHeap>>10)
	}
	if n := len(app.server.Sessions()); n != 0 {
		t.Errorf("server still lists %d sessions", n)
	}
}
