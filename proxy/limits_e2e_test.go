package proxy

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// Limits end to end: fair limits and locked doors — the upstream throughput cap,
// account max_binds, allowed_networks, bcrypt passwords, throughput and
// window, and back-pressure when every upstream window is full.

// An upstream with throughput 50 under a client offering
// far more. The token bucket (rate r = 50/s, burst b = 5) lets at most
// b + r·T submits through in any span T, so the SMSC sees at most that many
// over the whole test however slowly the machine runs it (a slow machine
// only makes T longer); the excess is answered 0x58 within route_wait (and
// recorded retryable), or — with a route_wait long enough and a client
// window — waits and is sent. The test decides by counts, not by when a
// submit arrived: a loaded machine delays and bunches arrivals, so a count
// per calendar second at the SMSC proves nothing about the proxy.
func TestUpstreamThroughputCap(t *testing.T) {
	const capPerSecond = 50
	const burst = capPerSecond / 10
	// mostAllowed is what the bucket grants in elapsed (+1 for a token
	// that comes due at the last instant).
	mostAllowed := func(elapsed time.Duration) int64 {
		return burst + int64(capPerSecond*elapsed.Seconds()) + 1
	}
	setup := func(t *testing.T, routeWait time.Duration) (*sim.Simulator, *App) {
		smsc, cfg := simConfig(t, sim.Config{})
		cfg.Upstreams[0].Throughput = capPerSecond
		cfg.Upstreams[0].RouteWait = config.Duration(routeWait)
		cfg.Upstreams[0].Binds, cfg.Upstreams[0].Window = 2, 50
		cfg.Accounts[0].Window = 1000
		return smsc, startProxy(t, cfg)
	}

	t.Run("excess gets 0x58", func(t *testing.T) {
		const routeWait = 200 * time.Millisecond
		smsc, app := setup(t, routeWait)
		c := dialClients(t, app.Addr(), "shop", "secret", 1, 0)[0]

		// Ten waves of 100 submits sent at once: a wave asks for 20 times
		// the bucket's burst, whatever the machine's speed.
		const waves, perWave = 10, 100
		var ok, throttled int
		var throttledKey string
		var slowest time.Duration
		start := time.Now()
		for w := range waves {
			chans := make([]<-chan esme.Result, perWave)
			sent := time.Now()
			for i := range chans {
				chans[i] = c.SubmitAsync(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("tp-%d", w*perWave+i), Text: []byte("x")})
			}
			for i, ch := range chans {
				r := <-ch
				if r.Err != nil {
					t.Fatalf("submit: %v", r.Err)
				}
				switch r.Resp.Status {
				case smpp.StatusOK:
					ok++
				case smpp.StatusThrottled:
					throttled++
					throttledKey = fmt.Sprintf("tp-%d", w*perWave+i)
					slowest = max(slowest, time.Since(sent))
				default:
					t.Errorf("answer %v, want 0 or 0x58", r.Resp.Status)
				}
			}
		}
		elapsed := time.Since(start)
		t.Logf("offered %d in %d waves over %v: %d accepted, %d throttled (last 0x58 of a wave after %v)",
			waves*perWave, waves, elapsed.Round(time.Millisecond), ok, throttled, slowest.Round(time.Millisecond))
		if limit := mostAllowed(elapsed); smsc.Total() > limit {
			t.Errorf("SMSC saw %d submits in %v, want at most %d (burst %d + %d/s)", smsc.Total(), elapsed, limit, burst, capPerSecond)
		}
		if int64(ok) != smsc.Total() || throttled == 0 {
			t.Errorf("accepted %d (SMSC saw %d), throttled %d of %d; want the SMSC's count accepted and the excess throttled",
				ok, smsc.Total(), throttled, waves*perWave)
		}
		if throttledKey == "" {
			return
		}
		rec, err := app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:" + throttledKey})
		if err != nil || rec.State != state.Retryable {
			t.Errorf("record of %s, answered 0x58 = %+v, %v; want retryable", throttledKey, rec, err)
		}
	})

	t.Run("waits when route_wait allows", func(t *testing.T) {
		smsc, app := setup(t, 10*time.Second)
		// A client window of 20: the offered load is as fast as answers
		// come back, far above the cap, and never beyond route_wait.
		c := dialClients(t, app.Addr(), "shop", "secret", 1, 20)[0]
		const n = 80
		start := time.Now()
		var chans []<-chan esme.Result
		for i := range n {
			chans = append(chans, c.SubmitAsync(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("tw-%d", i), Text: []byte("x")}))
		}
		for _, ch := range chans {
			if r := <-ch; r.Err != nil || r.Resp.Status != 0 {
				t.Fatalf("submit = %+v, %v; want accepted after waiting for a token", r.Resp, r.Err)
			}
		}
		elapsed := time.Since(start)
		// n tokens at 50/s after a burst of 5 take (n-5)/50 s at least
		// (a slow machine only takes longer).
		if min := time.Duration(float64(n-burst) / capPerSecond * float64(time.Second)); elapsed < min-50*time.Millisecond {
			t.Errorf("%d submits took %v, faster than the cap allows (%v)", n, elapsed, min)
		}
		if got := smsc.Total(); got != n {
			t.Errorf("SMSC saw %d submits, want %d", got, n)
		}
	})
}

// Account limits. The (max_binds+1)-th bind, a bind from
// a network outside allowed_networks, and a wrong bcrypt password are each
// refused 0x0D (and the connection closed); a burst over the account's
// throughput gets 0x58 at once; beyond the account's window a session gets
// 0x58 at once instead of a queue.
func TestAccountLimits(t *testing.T) {
	gate := make(chan struct{})
	var gated atomic.Bool
	smsc := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if gated.Load() {
			<-gate
		}
		return sim.Action{}
	}})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	shop := cfg.Accounts[0]
	shop.Password, shop.PasswordHash = "", string(hash)
	shop.MaxBinds, shop.Throughput, shop.Window = 2, 20, 200
	branch := config.AccountDefaults()
	branch.SystemID, branch.Password, branch.Route = "branch", "pw", []string{"smsc"}
	branch.AllowedNetworks = []string{"10.0.0.0/8", "192.0.2.7"}
	small := config.AccountDefaults()
	small.SystemID, small.Password, small.Route = "small", "pw", []string{"smsc"}
	small.Window = 4
	cfg.Accounts = []config.Account{shop, branch, small}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	app := startProxy(t, cfg)

	refused := func(t *testing.T, id, pw string) {
		t.Helper()
		c := dialESME(t, app.Addr())
		if st := c.bind(smpp.CmdBindTransceiver, id, pw); st != smpp.StatusBindFail {
			t.Errorf("bind as %s = %v, want ESME_RBINDFAIL", id, st)
		}
		select {
		case <-c.Done():
		case <-time.After(3 * time.Second):
			t.Errorf("bind as %s refused but the connection stayed open", id)
		}
	}

	t.Run("max_binds", func(t *testing.T) {
		first := dialESME(t, app.Addr())
		second := dialESME(t, app.Addr())
		for _, c := range []*esmeConn{first, second} {
			if st := c.bind(smpp.CmdBindTransceiver, "shop", "s3cret"); st != 0 {
				t.Fatalf("bind within max_binds = %v", st)
			}
		}
		refused(t, "shop", "s3cret")
		// Unbinding frees the slot for the next bind.
		if f, err := first.call(smpp.EncodeSimple(smpp.CmdUnbind, 0, 2, nil), 3*time.Second); err != nil || smpp.ParseHeader(f).Status != 0 {
			t.Fatalf("unbind = %v", err)
		}
		<-first.Done()
		var again *esmeConn
		waitFor(t, 3*time.Second, "the freed bind slot", func() bool {
			again = dialESME(t, app.Addr())
			return again.bind(smpp.CmdBindTransceiver, "shop", "s3cret") == 0
		})
		again.Close()
		second.Close()
	})
	t.Run("allowed_networks", func(t *testing.T) { refused(t, "branch", "pw") })
	t.Run("wrong bcrypt password", func(t *testing.T) { refused(t, "shop", "s3cre7") })
	t.Run("unknown system_id", func(t *testing.T) { refused(t, "nobody", "pw") })

	t.Run("throughput burst", func(t *testing.T) {
		// Wait until every shop bind of the previous subtest is released.
		var c *esme.Client
		waitFor(t, 3*time.Second, "a shop bind", func() bool {
			var err error
			c, err = esme.Dial(t.Context(), app.Addr(), esme.Options{SystemID: "shop", Password: "s3cret"})
			return err == nil
		})
		defer c.Close()
		const n = 60
		before := smsc.Total()
		start := time.Now()
		var chans []<-chan esme.Result
		for i := range n {
			chans = append(chans, c.SubmitAsync(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("burst-%d", i), Text: []byte("x")}))
		}
		var ok, throttled int
		for _, ch := range chans {
			r := <-ch
			switch {
			case r.Err != nil:
				t.Fatalf("submit: %v", r.Err)
			case r.Resp.Status == 0:
				ok++
			case r.Resp.Status == smpp.StatusThrottled:
				throttled++
			default:
				t.Errorf("burst answer %v, want 0 or 0x58", r.Resp.Status)
			}
		}
		elapsed := time.Since(start)
		// Throughput 20/s, burst 2: at most 2 + 20·elapsed pass.
		if limit := 2 + int(20*elapsed.Seconds()) + 1; ok > limit || throttled == 0 || ok+throttled != n {
			t.Errorf("burst of %d in %v: %d accepted, %d throttled; want at most %d accepted and the rest 0x58", n, elapsed, ok, throttled, limit)
		}
		if got := smsc.Total() - before; got != int64(ok) {
			t.Errorf("SMSC received %d, want only the %d accepted (0x58 is answered by the proxy)", got, ok)
		}
	})

	t.Run("window", func(t *testing.T) {
		gated.Store(true)
		released := false
		release := func() {
			if !released {
				released = true
				gated.Store(false)
				close(gate)
			}
		}
		defer release()
		c := dialClients(t, app.Addr(), "small", "pw", 1, 0)[0]
		before := smsc.Total()
		var chans []<-chan esme.Result
		for i := range 4 {
			chans = append(chans, c.SubmitAsync(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: fmt.Sprintf("win-%d", i), Text: []byte("x")}))
		}
		waitFor(t, 5*time.Second, "4 submits at the SMSC", func() bool { return smsc.Total()-before == 4 })
		for i := 4; i < 10; i++ {
			r, err := c.Submit(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: fmt.Sprintf("win-%d", i), Text: []byte("x")})
			if err != nil || r.Status != smpp.StatusThrottled {
				t.Errorf("submit beyond window 4 = %+v, %v; want 0x58 at once", r, err)
			}
		}
		release()
		for _, ch := range chans {
			if r := <-ch; r.Err != nil || r.Resp.Status != 0 {
				t.Errorf("submit within the window = %+v, %v; want accepted", r.Resp, r.Err)
			}
		}
		if got := smsc.Total() - before; got != 4 {
			t.Errorf("SMSC received %d, want 4", got)
		}
	})
}

// Back-pressure: every bind of the route is at its window → a new submit
// waits route_wait, then gets 0x58 (its record retryable, nothing sent);
// under a flood the proxy holds at most sessions × account window submits
// (goroutines bounded, nothing queued upstream); once the SMSC answers, the
// held submits complete and a retry of a throttled key goes through.
func TestBackPressureWhenEveryWindowIsFull(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	smsc := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.KeyCount == 1 && len(c.Key) > 5 && c.Key[:5] == "held-" {
			<-gate
		}
		return sim.Action{}
	}})
	const routeWait = 300 * time.Millisecond
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	up := &cfg.Upstreams[0]
	up.Binds, up.Window = 2, 3
	up.ForwardKeyTLV = true // the simulator sees the keys
	up.RouteWait = config.Duration(routeWait)
	up.ResponseTimeout = config.Duration(60 * time.Second)
	const sessions, window = 10, 20
	cfg.Accounts[0].Window = window
	app := startProxy(t, cfg)
	cs := dialClients(t, app.Addr(), "shop", "secret", sessions, window)

	// Fill every upstream window: 2 binds × 3.
	var held []<-chan esme.Result
	for i := range 6 {
		held = append(held, cs[0].SubmitAsync(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: fmt.Sprintf("held-%d", i), Text: []byte("x")}))
	}
	waitFor(t, 5*time.Second, "6 submits held at the SMSC", func() bool { return smsc.Total() == 6 })

	for i := range 3 {
		start := time.Now()
		r, err := cs[1].Submit(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: fmt.Sprintf("late-%d", i), Text: []byte("x")})
		el := time.Since(start)
		if err != nil || r.Status != smpp.StatusThrottled {
			t.Fatalf("submit with every window full = %+v, %v; want 0x58", r, err)
		}
		if el < routeWait || el > routeWait+3*time.Second {
			t.Errorf("0x58 after %v, want after route_wait (%v), within a few seconds", el, routeWait)
		}
	}
	rec, err := app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:late-0"})
	if err != nil || rec.State != state.Retryable {
		t.Errorf("record of a submit refused for back-pressure = %+v, %v; want retryable", rec, err)
	}

	// Flood: every session keeps its window full for a while.
	runtime.GC()
	base := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc
	stop := make(chan struct{})
	var peakG atomic.Int64
	var peakHeap atomic.Uint64
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			peakG.Store(max(peakG.Load(), int64(runtime.NumGoroutine())))
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peakHeap.Store(max(peakHeap.Load(), m.HeapAlloc))
		}
	})
	const perSession = 60
	var wg sync.WaitGroup
	var throttled, other atomic.Int64
	for si, c := range cs {
		wg.Go(func() {
			var chans []<-chan esme.Result
			for i := range perSession {
				chans = append(chans, c.SubmitAsync(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: fmt.Sprintf("flood-%d-%d", si, i), Text: []byte("x")}))
			}
			for _, ch := range chans {
				r := <-ch
				if r.Err == nil && r.Resp.Status == smpp.StatusThrottled {
					throttled.Add(1)
				} else {
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	if throttled.Load() != sessions*perSession || other.Load() != 0 {
		t.Errorf("flood: %d answered 0x58, %d otherwise; want all %d 0x58", throttled.Load(), other.Load(), sessions*perSession)
	}
	if got := smsc.Total(); got != 6 {
		t.Errorf("SMSC received %d during the flood, want still 6 (nothing queued upstream)", got)
	}
	// Per outstanding submit: the client's waiter and the proxy's handler
	// (plus a timer goroutine or two); per session a fixed handful.
	if limit := int64(base + sessions*window*4 + sessions*4); peakG.Load() > limit {
		t.Errorf("goroutines peaked at %d under the flood (baseline %d), want at most %d: bounded by sessions × window", peakG.Load(), base, limit)
	}
	if peakHeap.Load() > baseHeap+64<<20 {
		t.Errorf("heap peaked at %d MiB under the flood (baseline %d MiB)", peakHeap.Load()>>20, baseHeap>>20)
	}
	t.Logf("flood of %d: goroutines %d → peak %d; heap %d KiB → peak %d KiB",
		sessions*perSession, base, peakG.Load(), baseHeap>>10, peakHeap.Load()>>10)

	release()
	for _, ch := range held {
		if r := <-ch; r.Err != nil || r.Resp.Status != 0 {
			t.Errorf("held submit = %+v, %v; want accepted once the SMSC answers", r.Resp, r.Err)
		}
	}
	r, err := cs[1].Submit(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: "late-0", Text: []byte("x")})
	if err != nil || r.Status != 0 {
		t.Errorf("retry of a throttled key = %+v, %v; want forwarded and accepted", r, err)
	}
	if n := smsc.Count("late-0"); n != 1 {
		t.Errorf("SMSC received late-0 %d times, want once", n)
	}
}

// listen.max_connections_per_ip and listen.max_connections reach the
// server: a connection beyond either cap is closed at once, with nothing
// sent, and counted by reason; the connections within the caps are served.
func TestProxyClosesConnectionsBeyondTheConfiguredCaps(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	tests := map[string]struct {
		total, perIP int
	}{
		"max_connections_per_ip": {total: 100, perIP: 1},
		"max_connections":        {total: 1, perIP: 100},
	}
	for reason, tt := range tests {
		t.Run(reason, func(t *testing.T) {
			cfg := testConfig(t, smsc.Addr(), t.TempDir())
			cfg.Listen.MaxConnections, cfg.Listen.MaxConnectionsPerIP = tt.total, tt.perIP
			cfg.Listen.BindTimeout = config.Duration(time.Minute) // only the cap may close it
			reg := prometheus.NewRegistry()
			app := startProxyWith(t, Options{Config: cfg, Registerer: reg})
			first := dialESME(t, app.Addr())
			if st := first.bind(smpp.CmdBindTransceiver, "shop", "secret"); st != smpp.StatusOK {
				t.Fatalf("bind within the caps = %v", st)
			}
			extra := dialESME(t, app.Addr())
			select {
			case <-extra.Done():
			case <-time.After(3 * time.Second):
				t.Fatalf("a connection beyond %s stayed open", reason)
			}
			if got := metric(t, reg, "smppproxy_esme_connections_refused_total", map[string]string{"reason": reason}); got != 1 {
				t.Errorf("smppproxy_esme_connections_refused_total{reason=%q} = %v, want 1", reason, got)
			}
			if r := first.submit(2, keyed("k-1", "hello")); r.Status != smpp.StatusOK {
				t.Errorf("submit on the connection within the caps = %v, want 0", r.Status)
			}
		})
	}
}

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
