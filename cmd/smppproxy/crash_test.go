package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

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
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "SMPPPROXY_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proxyProcess{cmd: cmd, out: out}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		_ = out.Close()
	})
	return p
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
accounts:
  - system_id: shop
    password: secret
    max_binds: 10
    window: 100
    route: [smsc]
upstreams:
  - name: smsc
    address: %q
    system_id: proxy
    password: pw
    binds: 2
    window: 50
    response_timeout: 2s
`, listen, freePort(t), filepath.Join(dir, "data"), smsc)
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

// kill -9 of `smppproxy serve` in the middle of a windowed load with
// retries; after the restart the client retries everything. No key may
// reach the SMSC twice (on_unknown: hold) and every message the ESME saw
// acknowledged keeps its message_id.
func TestKill9DuringLoadNeverDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	smsc, err := sim.Start("127.0.0.1:0", sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Delay: time.Duration(c.N%5) * time.Millisecond}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer smsc.Close()
	dir := t.TempDir()
	listen := freePort(t)
	cfgPath := writeConfig(t, dir, listen, smsc.Addr())
	logPath := filepath.Join(dir, "proxy.log")
	p := startServe(t, cfgPath, logPath)

	const keys = 400
	var mu sync.Mutex
	acked := map[int]string{} // key index → message id the ESME saw
	text := func(i int) []byte { return []byte(fmt.Sprintf("payment notice %d", i)) }
	send := func(c *esme.Client, i int) (esme.Resp, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900001", Key: fmt.Sprintf("pay-%d", i), Text: text(i)})
	}

	// Load: 4 clients, windowed, each retrying its keys until the crash.
	c := dialReady(t, listen)
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 4 {
				r, err := send(c, i)
				if err == nil && r.Status == 0 {
					mu.Lock()
					acked[i] = r.MessageID
					mu.Unlock()
					// A duplicate retry on the same session, like a double click.
					if i%7 == 0 {
						_, _ = send(c, i)
					}
				}
				select {
				case <-killed:
					return
				default:
				}
			}
		}()
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= keys/3
	}, "a third of the keys acknowledged before the crash")
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()
	close(killed)
	wg.Wait()
	c.Close()
	mu.Lock()
	ackedAtCrash := len(acked)
	mu.Unlock()

	// Restart on the same data dir and retry every key.
	startServe(t, cfgPath, logPath)
	c2 := dialReady(t, listen)
	defer c2.Close()
	unknown := 0
	for i := range keys {
		var r esme.Resp
		var err error
		for try := 0; try < 50; try++ {
			r, err = send(c2, i)
			if err == nil && r.Status != smpp.StatusThrottled {
				break
			}
			time.Sleep(20 * time.Millisecond) // paces the ESME's retry while the restarted proxy throttles
		}
		if err != nil {
			t.Fatalf("retry of key %d after restart: %v", i, err)
		}
		mu.Lock()
		want, wasAcked := acked[i]
		mu.Unlock()
		switch {
		case wasAcked && (r.Status != 0 || r.MessageID != want):
			t.Errorf("key %d was acknowledged with %q before the crash; after restart got status %v id %q", i, want, r.Status, r.MessageID)
		case r.Status == smpp.StatusSysErr:
			unknown++ // in flight at the crash: unknown, held
		case r.Status != 0:
			t.Errorf("key %d after restart: status %v", i, r.Status)
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
