package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// notifySocket listens where a child's sd_notify datagrams go (as systemd
// does) and sets $NOTIFY_SOCKET for the children started after it.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	conn, path := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// listenNotify listens on a new unixgram socket for sd_notify datagrams
// and returns it with its path.
func listenNotify(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, path
}

// nextState reads the next datagram and checks that its first line is
// want.
func nextState(t *testing.T, conn *net.UnixConn, want string) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("waiting for %s from the proxy: %v", want, err)
	}
	got := string(buf[:n])
	if first, _, _ := strings.Cut(got, "\n"); first != want {
		t.Fatalf("sd_notify datagram %q, want %s first", got, want)
	}
	return got
}

// rewrite replaces old by new in the file at path (the test fails when old
// is not there).
func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func maxBinds(t *testing.T, auth ...string) int {
	t.Helper()
	var l admin.AccountList
	if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"accounts", "list", "--json"}, auth...)...)), &l); err != nil || len(l.Accounts) != 1 {
		t.Fatalf("accounts list --json: %+v, %v", l, err)
	}
	return l.Accounts[0].MaxBinds
}

// A serve child under a Type=notify manager: READY=1 once up; SIGHUP and
// `smppproxy reload` apply a changed file between RELOADING=1 and READY=1
// (log level included); a file that does not validate changes nothing and
// the command prints its file:line; STOPPING=1 at SIGTERM.
func TestReloadAppliesTheFileAndNotifiesSystemd(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	conn := notifySocket(t)
	p := startOps(t, smsc.Addr(), opsOptions{token: "adm-reload"})
	nextState(t, conn, "READY=1")
	cfgPath := filepath.Join(p.dir, "proxy.yaml")
	auth := []string{"--admin", strings.TrimPrefix(p.adminURL, "http://"), "--token-file", p.tokenFile}
	if n := maxBinds(t, auth...); n != 10 {
		t.Fatalf("max_binds before reload = %d, want 10", n)
	}

	rewrite(t, cfgPath, "max_binds: 10", "max_binds: 3")
	rewrite(t, cfgPath, "level: info", "level: debug")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := nextState(t, conn, "RELOADING=1"); !strings.Contains(got, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", got)
	}
	nextState(t, conn, "READY=1")
	if n := maxBinds(t, auth...); n != 3 {
		t.Fatalf("max_binds after SIGHUP = %d, want 3", n)
	}
	log, _ := os.ReadFile(p.logPath)
	if !strings.Contains(string(log), "log.level: INFO → DEBUG") {
		t.Errorf("the log does not report the new log level; log:\n%s", tail(string(log), 2000))
	}

	// A file that does not validate: nothing changes, the problem is named.
	rewrite(t, cfgPath, "max_binds: 3", "max_binds: 3\n    no_such_setting: 1")
	_, err := runCLI(t, append([]string{"reload"}, auth...)...)
	if err == nil || !strings.Contains(err.Error(), "HTTP 422") || !strings.Contains(err.Error(), "proxy.yaml:") {
		t.Fatalf("reload of a bad file: %v; want HTTP 422 naming proxy.yaml:LINE", err)
	}
	nextState(t, conn, "RELOADING=1")
	nextState(t, conn, "READY=1")
	if n := maxBinds(t, auth...); n != 3 {
		t.Fatalf("max_binds after a refused reload = %d, want 3 (unchanged)", n)
	}

	rewrite(t, cfgPath, "max_binds: 3\n    no_such_setting: 1", "max_binds: 5")
	out := mustCLI(t, append([]string{"reload"}, auth...)...)
	if !strings.Contains(out, "APPLIED (") {
		t.Errorf("reload printed %q, want the applied lines", out)
	}
	nextState(t, conn, "RELOADING=1")
	nextState(t, conn, "READY=1")
	if n := maxBinds(t, auth...); n != 5 {
		t.Fatalf("max_binds after reload = %d, want 5", n)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nextState(t, conn, "STOPPING=1")
	if code := waitExit(t, p.proxyProcess, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// upstreams drain/resume and accounts disable/enable through the CLI, the
// admin address and token taken from the environment (a bare HOST:PORT)
// and from --config: a disabled account's session is closed and its binds
// refused until enabled; unknown names fail with 404.
func TestCLIDrainAndDisable(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	p := startOps(t, smsc.Addr(), opsOptions{token: "adm-switch"})
	t.Setenv(envAdmin, strings.TrimPrefix(p.adminURL, "http://"))
	t.Setenv(envTokenFile, p.tokenFile)
	trx := dialAs(t, p.listen, "secret", smpp.BindTransceiver)

	out := mustCLI(t, "upstreams", "drain", "smsc")
	if !strings.Contains(out, "upstream smsc drained") || !strings.Contains(out, "until undone or a restart") {
		t.Errorf("drain printed %q", out)
	}
	if out := mustCLI(t, "upstreams", "list"); !strings.Contains(out, "DRAINED") || !strings.Contains(strings.Split(out, "\n")[1], "yes") {
		t.Errorf("upstreams list after drain:\n%s", out)
	}
	if out := mustCLI(t, "upstreams", "drain", "smsc"); !strings.Contains(out, "nothing changed") {
		t.Errorf("second drain printed %q", out)
	}
	mustCLI(t, "upstreams", "resume", "smsc")
	var ups admin.UpstreamList
	if err := json.Unmarshal([]byte(mustCLI(t, "upstreams", "list", "--json")), &ups); err != nil || ups.Upstreams[0].Drained {
		t.Fatalf("upstreams after resume: %+v, %v", ups, err)
	}

	// --config alone: its admin.address and token_file.
	t.Setenv(envAdmin, "")
	t.Setenv(envTokenFile, "")
	cfg := []string{"--config", filepath.Join(p.dir, "proxy.yaml")}
	out = mustCLI(t, append([]string{"accounts", "disable", "shop"}, cfg...)...)
	if !strings.Contains(out, "account shop disabled, 1 session(s) closed") {
		t.Errorf("disable printed %q", out)
	}
	select {
	case <-trx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the disabled account's session is still open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := esme.Dial(ctx, p.listen, esme.Options{SystemID: "shop", Password: "secret", Timeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a disabled account could bind")
	}
	mustCLI(t, append([]string{"accounts", "enable", "shop"}, cfg...)...)
	testkit.Eventually(t, 10*time.Second, func() bool {
		c, err := esme.Dial(ctx, p.listen, esme.Options{SystemID: "shop", Password: "secret", Timeout: 5 * time.Second})
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the enabled account never bound")

	for _, args := range [][]string{{"upstreams", "drain", "nope"}, {"accounts", "disable", "nope"}} {
		_, err := runCLI(t, append(args, cfg...)...)
		if !errors.Is(err, admin.ErrNotFound) {
			t.Errorf("smppproxy %v: %v, want 404", args, err)
		}
	}
}
