package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// Helpers of the subprocess tests: the test binary runs as `smppproxy
// serve` (TestMain), on a configuration written to a temporary directory,
// next to an in-process SMSC simulator.

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

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeConfig(t *testing.T, dir, listen, smsc string) string {
	t.Helper()
	cfg := fmt.Sprintf(`listen:
  address: %q
  bind_timeout: 5s
admin:
  address: %q
store:
  path: %q
log: {level: warn}
shutdown_timeout: 5s
`, listen, freePort(t), filepath.Join(dir, "data")) + routeYAML("secret", smsc, "pw", "binds: 2\nwindow: 50\nresponse_timeout: 2s")
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
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-test.run=^$", "--", "serve", "--config", cfgPath}, extra...)
	p := &proxyProcess{out: out}
	p.cmd = newChild(args...)
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

// waitAcked waits until at least n keys of acked (guarded by mu) were
// acknowledged.
func waitAcked(t *testing.T, mu *sync.Mutex, acked map[int]string, n int, what string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n
	}, what)
}
