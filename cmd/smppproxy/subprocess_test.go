package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// The subprocess tests: the test binary runs as `smppproxy serve`
// (TestMain), on a configuration written to a temporary directory, next to
// an in-process SMSC simulator. Here are their helpers and the tests of
// the process ending under load: killed (SIGKILL, a crash) with one store
// or one of two instances on a shared one, and stopped (SIGTERM).

// The test binary doubles as `smppproxy`: with SMPPPROXY_TEST_MAIN set it
// runs main() with the arguments after "--", so subprocess tests need no
// separate build.
func TestMain(m *testing.M) {
	if os.Getenv("SMPPPROXY_TEST_MAIN") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"smppproxy"}, os.Args[i+1:]...)
				break
			}
		}
		killBeforeWriteFromEnv()
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// proxyProcess runs `smppproxy serve` as a child process.
type proxyProcess struct {
	cmd *exec.Cmd
	out *os.File
}

func startServe(t *testing.T, cfgPath, logPath string) *proxyProcess {
	t.Helper()
	return startServeArgs(t, cfgPath, logPath)
}

// freePort returns a 127.0.0.1 address free now, for a child to listen
// on. Where the kernel says which ports it hands out by itself (to
// listeners on port 0 and to outgoing connections, of every process), the
// port is taken below that range (and below 25000, under the ports some
// services use there: RabbitMQ's 25672, Kubernetes' node ports), and each
// call in this process gives another one: a port freed inside the range
// could be handed to another process before the child listens on it (the
// child then exits, and a listener of that process may answer in its
// place).
func freePort(t *testing.T) string {
	t.Helper()
	if hi := min(ephemeralLow(), portsTo); hi > portsFrom+1000 {
		portOnce.Do(func() { portNext.Store(uint32(os.Getpid()*7919) % uint32(hi-portsFrom)) })
		for range 1000 {
			port := portsFrom + int(portNext.Add(1))%(hi-portsFrom)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if l, err := net.Listen("tcp", addr); err == nil {
				l.Close()
				return addr
			}
		}
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// portsFrom and portsTo bound the ports freePort gives.
const portsFrom, portsTo = 20000, 25000

var (
	portOnce sync.Once
	portNext atomic.Uint32
)

// ephemeralLow is the lowest port the kernel hands out by itself (Linux's
// ip_local_port_range), or 0 when it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0
	}
	return lo
}

// writeConfig writes dir/proxy.yaml: a proxy listening on listen, its
// Badger store in dir/data, shop routed to smsc.
func writeConfig(t *testing.T, dir, listen, smsc string) string {
	t.Helper()
	return writeServeConfig(t, dir, listen, smsc, fmt.Sprintf("  path: %q\n", filepath.Join(dir, "data")), "2s")
}

// writeSharedConfig writes the configuration of instance id of a proxy
// on the shared PostgreSQL store (schema) in front of smsc, listening on
// listen; its lease is short so that a test sees it run out.
func writeSharedConfig(t *testing.T, dsn, schema, id, listen, smsc string) string {
	t.Helper()
	store := fmt.Sprintf("  backend: postgres\n  dsn: %q\n  schema: %s\n  instance_id: %s\n  lease: 2s\n", dsn, schema, id)
	return writeServeConfig(t, t.TempDir(), listen, smsc, store, "10s")
}

// writeServeConfig writes dir/proxy.yaml: listening on listen (the admin
// API on a free port), the store section store (its indented lines), log
// level warn, and shop routed to smsc with the upstream's response_timeout
// responseTimeout.
func writeServeConfig(t *testing.T, dir, listen, smsc, store, responseTimeout string) string {
	t.Helper()
	cfg := fmt.Sprintf(`listen:
  address: %q
  bind_timeout: 5s
admin:
  address: %q
store:
%slog: {level: warn}
shutdown_timeout: 5s
`, listen, freePort(t), store) + routeYAML("secret", smsc, "pw", "binds: 2\nwindow: 50\nresponse_timeout: "+responseTimeout)
	p := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dialReady binds to the proxy as a shop transceiver (window 20) once it
// accepts and its upstream is bound.
func dialReady(t *testing.T, addr string) *esme.Client {
	t.Helper()
	return dialUntilBound(t, addr, esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindTransceiver, Timeout: 5 * time.Second, Window: 20})
}

// dialUntilBound dials and binds with opts until the proxy at addr
// accepts, for up to 30s (a child process starting).
func dialUntilBound(t *testing.T, addr string, opts esme.Options) *esme.Client {
	t.Helper()
	var c *esme.Client
	testkit.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		c, err = esme.Dial(ctx, addr, opts)
		return err == nil
	}, "proxy at "+addr+" never accepted a bind")
	return c
}

// newChild is the test binary run as `smppproxy` (see TestMain).
func newChild(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SMPPPROXY_TEST_MAIN=1")
	return cmd
}

// startServeArgs is startServe with extra serve flags.
func startServeArgs(t *testing.T, cfgPath, logPath string, extra ...string) *proxyProcess {
	t.Helper()
	return startServeEnv(t, cfgPath, logPath, nil, extra...)
}

// startServeEnv is startServeArgs with env (KEY=value) added to the
// child's environment.
func startServeEnv(t *testing.T, cfgPath, logPath string, env []string, extra ...string) *proxyProcess {
	t.Helper()
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-test.run=^$", "--", "serve", "--config", cfgPath}, extra...)
	p := &proxyProcess{out: out}
	p.cmd = newChild(args...)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		_ = out.Close()
	})
	return p
}

// dialBind binds to the proxy as shop with bind type bt once it accepts.
func dialBind(t *testing.T, addr string, bt smpp.BindType) *esme.Client {
	t.Helper()
	return dialUntilBound(t, addr, esme.Options{SystemID: "shop", Password: "secret", Bind: bt, Timeout: 5 * time.Second})
}

// routeYAML is the accounts and upstreams of a child's configuration: the
// account shop (password, 10 binds, window 100) routed to the upstream
// smsc at addr, bound as proxy with upstreamPass; upstreamLines (one
// "key: value" a line) complete the upstream.
func routeYAML(password, addr, upstreamPass, upstreamLines string) string {
	var up strings.Builder
	for _, l := range strings.Split(upstreamLines, "\n") {
		up.WriteString("    " + l + "\n")
	}
	return fmt.Sprintf(`accounts:
  - system_id: shop
    password: %q
    max_binds: 10
    window: 100
    route: [smsc]
upstreams:
  - name: smsc
    address: %q
    system_id: proxy
    password: %q
`, password, addr, upstreamPass) + up.String()
}

// crashRig is the set-up of a crash test: an SMSC answering after 0–4 ms,
// and a proxy's configuration (listening on listen, its Badger store and
// its log, logPath, in dir) in front of it.
func crashRig(t *testing.T) (smsc *sim.Simulator, dir, listen, cfgPath, logPath string) {
	t.Helper()
	smsc = subprocessSMSC(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%5) * time.Millisecond}
	}})
	dir, listen = t.TempDir(), freePort(t)
	return smsc, dir, listen, writeConfig(t, dir, listen, smsc.Addr()), filepath.Join(dir, "proxy.log")
}

// subprocessSMSC skips the test in -short mode (it runs `smppproxy` as a
// child) and starts an SMSC simulator with cfg, closed at the end of the
// test.
func subprocessSMSC(t *testing.T, cfg sim.Config) *sim.Simulator {
	t.Helper()
	if testing.Short() {
		t.Skip("subprocess test")
	}
	smsc, err := sim.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(smsc.Close)
	return smsc
}

// dropLost is a simulator that never answers the keys starting with "lost".
var dropLost = sim.Config{Fault: func(c sim.Call) sim.Action {
	return sim.Action{Drop: strings.HasPrefix(c.Key, "lost")}
}}

// dialSubmit binds to addr with opts and submits sub, which must be
// accepted; the client is closed at the end of the test.
func dialSubmit(ctx context.Context, t *testing.T, addr string, opts esme.Options, sub esme.Submit) (*esme.Client, esme.Resp) {
	t.Helper()
	c, err := esme.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r, err := c.Submit(ctx, sub)
	if err != nil || r.Status != 0 {
		t.Fatalf("submit to %s: %+v, %v", addr, r, err)
	}
	return c, r
}

// waitExit waits for the child to exit within d and returns its exit code.
func waitExit(t *testing.T, p *proxyProcess, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("the proxy did not exit within %v", d)
		return -1
	}
}

// kill9 kills the child (SIGKILL: what a crash looks like) and reaps it.
func (p *proxyProcess) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()
}

// keyLoad is the load of a crash test: keys 0..n-1 ("pay-<i>"), and the
// message id the ESME saw each acknowledged key with.
type keyLoad struct {
	mu    sync.Mutex
	acked map[int]string
}

// sendKey submits key i on c.
func sendKey(c *esme.Client, i int) (esme.Resp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("pay-%d", i), Text: []byte(fmt.Sprintf("payment notice %d", i))})
}

// start sends keys 0..n-1 on c from 4 goroutines (goroutine w sends w,
// w+4, …), records each key acknowledged, then calls next with the answer;
// a goroutine stops when next returns false or its keys run out. wait
// returns once all four stopped.
func (l *keyLoad) start(c *esme.Client, n int, next func(i int, r esme.Resp, err error) bool) (wait func()) {
	l.acked = map[int]string{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				r, err := sendKey(c, i)
				if err == nil && r.Status == 0 {
					l.mu.Lock()
					l.acked[i] = r.MessageID
					l.mu.Unlock()
				}
				if !next(i, r, err) {
					return
				}
			}
		})
	}
	return wg.Wait
}

// count is the number of keys acknowledged so far.
func (l *keyLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits until at least n keys were acknowledged.
func (l *keyLoad) waitAcked(t *testing.T, n int, what string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool { return l.count() >= n }, what)
}

// check checks the final answer r to key i, got where (after a restart,
// on the other instance), against what the ESME saw before the crash: a
// key it saw acknowledged keeps its message id; any other is accepted, or
// unknown (ESME_RSYSERR: in flight at the crash, held, not resent). It
// reports whether the key was unknown.
func (l *keyLoad) check(t *testing.T, i int, r esme.Resp, where string) (unknown bool) {
	t.Helper()
	l.mu.Lock()
	want, wasAcked := l.acked[i]
	l.mu.Unlock()
	switch {
	case wasAcked && (r.Status != 0 || r.MessageID != want):
		t.Errorf("key %d was acknowledged with %q before the crash; %s got status %v id %q", i, want, where, r.Status, r.MessageID)
	case r.Status == smpp.StatusSysErr:
		return true
	case r.Status != 0:
		t.Errorf("key %d %s: status %v", i, where, r.Status)
	}
	return false
}

// retryUntilFinal sends key i on c until the answer is not 0x58 (for up
// to 20 s) and checks it (see check), reporting whether it was unknown.
func (l *keyLoad) retryUntilFinal(t *testing.T, c *esme.Client, i int, where string) (unknown bool) {
	t.Helper()
	var r esme.Resp
	testkit.Eventually(t, 20*time.Second, func() bool {
		var err error
		r, err = sendKey(c, i)
		return err == nil && r.Status != smpp.StatusThrottled
	}, fmt.Sprintf("a final answer %s for key %d", where, i))
	return l.check(t, i, r, where)
}

// kill -9 of `smppproxy serve` in the middle of a windowed load with
// retries; after the restart the client retries everything. No key may
// reach the SMSC twice (on_unknown: hold) and every message the ESME saw
// acknowledged keeps its message_id.
func TestKill9DuringLoadNeverDuplicates(t *testing.T) {
	smsc, _, listen, cfgPath, logPath := crashRig(t)
	p := startServe(t, cfgPath, logPath)

	const keys = 400
	// Load: 4 senders, windowed, each sending its keys until the crash.
	c := dialReady(t, listen)
	killed := make(chan struct{})
	var load keyLoad
	wait := load.start(c, keys, func(i int, r esme.Resp, err error) bool {
		if err == nil && r.Status == 0 && i%7 == 0 {
			_, _ = sendKey(c, i) // a duplicate retry on the same session, like a double click
		}
		select {
		case <-killed:
			return false
		default:
			return true
		}
	})
	load.waitAcked(t, keys/3, "a third of the keys acknowledged before the crash")
	p.kill9(t)
	close(killed)
	wait()
	c.Close()
	ackedAtCrash := load.count()

	// Restart on the same data dir and retry every key.
	startServe(t, cfgPath, logPath)
	c2 := dialReady(t, listen)
	defer c2.Close()
	unknown := 0
	for i := range keys {
		var r esme.Resp
		var err error
		for try := 0; try < 50; try++ {
			r, err = sendKey(c2, i)
			if err == nil && r.Status != smpp.StatusThrottled {
				break
			}
			time.Sleep(20 * time.Millisecond) // paces the ESME's retry while the restarted proxy throttles
		}
		if err != nil {
			t.Fatalf("retry of key %d after restart: %v", i, err)
		}
		if load.check(t, i, r, "after the restart") {
			unknown++
		}
	}
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	t.Logf("acked before the crash: %d of %d; unknown after restart (held, not resent): %d; SMSC received %d", ackedAtCrash, keys, unknown, smsc.Total())
	if smsc.Total() > keys {
		t.Errorf("SMSC received %d submits for %d keys", smsc.Total(), keys)
	}
}

// `smppproxy serve` is killed (SIGKILL) with receipts
// queued for an ESME that is not bound, and more receipts arrive while it
// is down (the SMSC keeps resending them); after the restart the ESME binds
// and gets every one of them.
func TestKill9WithQueuedReceiptsLosesNone(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	dir := t.TempDir()
	listen := freePort(t)
	cfgPath := writeConfig(t, dir, listen, smsc.Addr())
	logPath := filepath.Join(dir, "proxy.log")
	p := startServe(t, cfgPath, logPath)

	tx := dialBind(t, listen, smpp.BindTransmitter)
	const n = 30
	var ids []string
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := tx.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("crash-dlr-%d", i), Text: []byte("parcel on its way"), RegisteredDelivery: 1})
		cancel()
		if err != nil || r.Status != 0 {
			t.Fatalf("submit %d = %+v, %v", i, r, err)
		}
		ids = append(ids, r.MessageID)
	}
	tx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const before = 20 // acknowledged by the proxy, hence queued, before the kill
	for _, id := range ids[:before] {
		if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
			t.Fatalf("receipt %s before the kill: %v, %v", id, st, err)
		}
	}
	p.kill9(t)

	// The rest is produced while the proxy is down (the SMSC no longer
	// sees its bind): the SMSC resends them until the proxy is back.
	testkit.Eventually(t, 10*time.Second, func() bool { return smsc.Sessions() == 0 },
		"the SMSC still sees the killed proxy's bind")
	var wg, sending sync.WaitGroup
	for _, id := range ids[before:] {
		wg.Add(1)
		sending.Add(1)
		go func() {
			defer wg.Done()
			sending.Done()
			if st, err := smsc.SendReceipt(ctx, id, "DELIVRD"); err != nil || st != 0 {
				t.Errorf("receipt %s across the restart: %v, %v", id, st, err)
			}
		}()
	}
	sending.Wait()
	startServe(t, cfgPath, logPath)
	wg.Wait()

	rx := dialBind(t, listen, smpp.BindReceiver)
	defer rx.Close()
	var got []string
	timeout := time.After(15 * time.Second)
	for len(got) < n {
		select {
		case d := <-rx.Receipts():
			got = append(got, d.ReceiptedID)
		case <-timeout:
			t.Fatalf("after the restart the ESME got %d of %d receipts: %v", len(got), n, got)
		}
	}
	if !slices.Equal(got[:before], ids[:before]) {
		t.Errorf("receipts queued before the kill arrived as %v, want in order %v", got[:before], ids[:before])
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Errorf("after the restart the ESME got %v, want each of %v once", got, want)
	}
	select {
	case d := <-rx.Receipts():
		t.Errorf("extra receipt %s after all %d", d.ReceiptedID, n)
	case <-time.After(300 * time.Millisecond):
	}
}

// One of two instances sharing the store is killed (SIGKILL) under load;
// the ESME retries everything on the other. No key reaches the SMSC twice,
// every message the ESME saw acknowledged keeps its id, the survivor keeps
// serving, and the dead instance's in-flight keys become unknown once its
// lease has run out (held: on_unknown hold).
func TestKill9OfOneOfTwoInstancesNeverDuplicates(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "crash_test_")
	smsc := subprocessSMSC(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%50) * time.Millisecond}
	}})
	listenA, listenB := freePort(t), freePort(t)
	a := startServe(t, writeSharedConfig(t, dsn, schema, "a", listenA, smsc.Addr()), filepath.Join(t.TempDir(), "a.log"))
	startServe(t, writeSharedConfig(t, dsn, schema, "b", listenB, smsc.Addr()), filepath.Join(t.TempDir(), "b.log"))
	onA, onB := dialReady(t, listenA), dialReady(t, listenB)
	defer onB.Close()

	const keys = 200
	var load keyLoad
	wait := load.start(onA, keys, func(_ int, _ esme.Resp, err error) bool {
		return err == nil // else A is gone
	})
	load.waitAcked(t, keys/4, "a quarter of the keys acknowledged on A before the crash")
	a.kill9(t)
	onA.Close()
	wait()

	unknown := 0
	for i := range keys {
		// A key A had in flight is `sent` under A's lease: B throttles it
		// (0x58) while A may still be alive, then answers 0x08, once A has
		// missed its lease renewals and, after the lease ran out, as unknown.
		if load.retryUntilFinal(t, onB, i, "on B") {
			unknown++
		}
	}
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	if r, err := sendKey(onB, keys+1); err != nil || r.Status != 0 {
		t.Errorf("a fresh key on the survivor = %+v, %v; want accepted", r, err)
	}
	t.Logf("acked on A before the crash: %d of %d; unknown on B (held, not resent): %d; SMSC received %d", load.count(), keys, unknown, smsc.Total())
}

// SIGTERM in the middle of a windowed load. The process
// exits 0 within shutdown_timeout, and every submit the ESMEs saw
// acknowledged is in the store, accepted with the id they were given.
func TestSIGTERMDuringWindowedLoadLosesNoAck(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%4) * 5 * time.Millisecond}
	}})
	const timeout = 5 * time.Second
	p := startOps(t, smsc.Addr(), opsOptions{shutdownTimeout: timeout, responseTimeout: 2 * time.Second})

	var mu sync.Mutex
	acked := map[string]string{} // key → message id the ESME saw
	var wg sync.WaitGroup
	for w := range 3 {
		c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A window of 20 submits in flight per session until the
			// session ends.
			var inflight sync.WaitGroup
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				ch := c.SubmitAsync(context.Background(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: key, Text: []byte("notice " + key)})
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					res := <-ch
					if res.Err == nil && res.Resp.Status == 0 {
						mu.Lock()
						acked[key] = res.Resp.MessageID
						mu.Unlock()
					}
				}()
				select {
				case <-c.Done():
					inflight.Wait()
					return
				default:
				}
			}
		}()
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 300
	}, "300 submits acknowledged before SIGTERM")
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, p.proxyProcess, timeout+5*time.Second)
	took := time.Since(start)
	wg.Wait()
	logText, _ := os.ReadFile(p.logPath)
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; log tail:\n%s", code, tail(string(logText), 20))
	}
	if took > timeout {
		t.Errorf("shutdown took %v, more than shutdown_timeout %v", took, timeout)
	}
	if !strings.Contains(string(logText), "stopped") {
		t.Errorf("no clean stop in the log:\n%s", tail(string(logText), 20))
	}

	st, err := state.OpenBadger(state.BadgerOptions{Path: filepath.Join(p.dir, "data")})
	if err != nil {
		t.Fatalf("open the store after exit: %v", err)
	}
	defer st.Close()
	mu.Lock()
	defer mu.Unlock()
	for key, id := range acked {
		rec, err := st.Get(context.Background(), state.Key{Account: "shop", Key: "k:" + key})
		if err != nil || rec.State != state.Accepted || rec.MessageID != id {
			t.Errorf("acknowledged %s (id %s): store has %+v, %v", key, id, rec, err)
		}
	}
	t.Logf("%d submits acknowledged; SIGTERM to exit 0 in %v", len(acked), took.Round(time.Millisecond))
}

// The ports the tests' children listen on are outside the range the kernel
// hands out to other processes' listeners and connections, and never the
// same twice.
func TestChildPortsAreOutsideTheKernelsRangeAndNeverRepeat(t *testing.T) {
	lo := min(ephemeralLow(), portsTo)
	if lo <= portsFrom+1000 {
		t.Skipf("this kernel hands out ports from %d: freePort uses its own choice", lo)
	}
	seen := map[string]bool{}
	for range 200 {
		addr := freePort(t)
		_, port, _ := net.SplitHostPort(addr)
		var n int
		fmt.Sscan(port, &n)
		if n < portsFrom || n >= lo {
			t.Fatalf("freePort = %s, want a port in [%d, %d)", addr, portsFrom, lo)
		}
		if seen[addr] {
			t.Fatalf("freePort gave %s twice", addr)
		}
		seen[addr] = true
	}
}
