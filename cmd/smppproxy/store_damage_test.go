package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// damagedStore writes records into the store of dir, closes it and
// removes its MANIFEST (Badger would then delete every table).
func damagedStore(t *testing.T, dir string) {
	t.Helper()
	s, err := state.OpenBadger(state.BadgerOptions{Path: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 20 {
		rec := &state.Record{Key: state.Key{Account: "shop", Key: fmt.Sprintf("k%d", i)}, State: state.Accepted,
			MessageID: fmt.Sprintf("m%d", i), Created: now, Updated: now, Expires: now.Add(time.Hour)}
		if _, _, err := s.Create(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "data", "MANIFEST")); err != nil {
		t.Fatal(err)
	}
}

func serveCmd(ctx context.Context, cfgPath string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--", "serve", "--config", cfgPath}, args...)...)
	cmd.Env = append(os.Environ(), "SMPPPROXY_TEST_MAIN=1")
	return cmd
}

// runUntil starts cmd, waits until its output contains want (or fails the
// test at the deadline), then stops it with SIGTERM and returns its
// output; the process must exit 0.
func runUntil(t *testing.T, cmd *exec.Cmd, want string) string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var exitErr error
	exitedEarly := false
	logged := testkit.Poll(30*time.Second, func() bool {
		logs, _ := os.ReadFile(logPath)
		if bytes.Contains(logs, []byte(want)) {
			return true
		}
		select {
		case exitErr = <-exited:
			exitedEarly = true
			return true
		default:
			return false
		}
	})
	if exitedEarly {
		logs, _ := os.ReadFile(logPath)
		t.Fatalf("serve exited (%v) before logging %q; output:\n%s", exitErr, want, logs)
	}
	if !logged {
		_ = cmd.Process.Kill()
		<-exited
		logs, _ := os.ReadFile(logPath)
		t.Fatalf("serve never logged %q; output:\n%s", want, logs)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		logs, _ := os.ReadFile(logPath)
		t.Fatalf("serve after SIGTERM: %v; output:\n%s", err, logs)
	}
	logs, _ := os.ReadFile(logPath)
	return string(logs)
}

// serve refuses a store that lost data: it exits non-zero saying what to
// do, before it listens. --force-empty-store starts it deliberately (with
// a warning), after which a plain serve starts again.
func TestServeRefusesADamagedStoreUnlessForced(t *testing.T) {
	dir := t.TempDir()
	damagedStore(t, dir)
	cfg := writeConfig(t, dir, freePort(t), freePort(t))
	if err := os.WriteFile(cfg, bytes.Replace(mustRead(t, cfg), []byte("level: warn"), []byte("level: info"), 1), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := serveCmd(ctx, cfg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve on a damaged store: err = %v, want a non-zero exit; output:\n%s", err, out)
	}
	for _, want := range []string{"store damaged", "MANIFEST is missing", "backup", "--force-empty-store"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("serve's refusal does not say %q; output:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "SMPP listening") || strings.Contains(string(out), "admin API listening") {
		t.Errorf("serve listened before refusing the store; output:\n%s", out)
	}

	logs := runUntil(t, serveCmd(ctx, cfg, "--force-empty-store"), "admin API listening")
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "force-empty-store") {
		t.Errorf("a forced start did not warn; output:\n%s", logs)
	}
	runUntil(t, serveCmd(ctx, cfg), "admin API listening")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
