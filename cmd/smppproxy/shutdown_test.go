package main

import (
	"context"
	"fmt"
	"os"
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
	"github.com/smppproxy/smppproxy/state"
)

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

// A submit whose text is an OTP code, at debug level in
// JSON: neither the code, nor any password (account, upstream, a wrong one
// tried in a bind), nor the admin token, nor the full phone number appears
// in any log line. Decisions are logged with their key.
func TestLogsNeverCarryTextPasswordsOrNumbers(t *testing.T) {
	const (
		otp       = "482915"
		password  = "Pw9137xq"
		upstream  = "Up5521zk"
		wrongPass = "Wr4410qq"
		token     = "adm-tok-66120"
		number    = "447700900123"
	)
	smsc := subprocessSMSC(t, sim.Config{SystemID: "proxy", Password: upstream})
	p := startOps(t, smsc.Addr(), opsOptions{logFormat: "json", logLevel: "debug", password: password, upstreamPass: upstream, token: token})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := esme.Dial(ctx, p.listen, esme.Options{SystemID: "shop", Password: wrongPass, Timeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a bind with a wrong password succeeded")
	}
	c := dialAs(t, p.listen, password, smpp.BindTransceiver)
	for range 2 { // forwarded, then replayed
		r, err := c.Submit(ctx, esme.Submit{Src: "BANK", Dst: number, Key: "login-7", Text: []byte("Your code is " + otp)})
		if err != nil || r.Status != 0 {
			t.Fatalf("submit: %+v, %v", r, err)
		}
	}
	mustCLI(t, "keys", "show", "shop", "login-7", "--admin", p.adminURL, "--token-file", p.tokenFile)
	// SIGHUP reloads the configuration (unchanged) without dropping the
	// session; the reload's lines carry no secret either.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if !testkit.Poll(5*time.Second, func() bool {
		b, _ = os.ReadFile(p.logPath)
		return strings.Contains(string(b), `"msg":"configuration reloaded","by":"SIGHUP"`)
	}) {
		t.Fatalf("no SIGHUP answer in the log:\n%s", tail(string(b), 10))
	}
	if r, err := c.Submit(ctx, esme.Submit{Src: "BANK", Dst: number, Key: "login-7", Text: []byte("Your code is " + otp)}); err != nil || r.Status != 0 {
		t.Fatalf("submit after SIGHUP: %+v, %v", r, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p.proxyProcess, 10*time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	logText := string(raw)
	lines := strings.Split(strings.TrimSpace(logText), "\n")
	for _, secret := range []string{otp, password, upstream, wrongPass, token, number} {
		for _, l := range lines {
			if strings.Contains(l, secret) {
				t.Errorf("log line carries %q: %s", secret, l)
			}
		}
	}
	for _, want := range []string{`"key":"k:login-7"`, `"outcome":"forwarded"`, "duplicate replayed", "bind refused: wrong password"} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %s; %d lines:\n%s", want, len(lines), tail(logText, 30))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
