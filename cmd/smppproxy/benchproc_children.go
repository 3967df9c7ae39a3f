package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

// childProc is `smppproxy sim` or `smppproxy serve` run by the
// out-of-process bench, its output in a log file of the bench's
// directory.
type childProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	exited  chan struct{}
	err     error // of Wait, once exited is closed
}

// startChild runs the bench's executable with args (after o.ExeArgs),
// output to dir/name.log (appended: a restarted serve keeps one log).
func startChild(o procBenchOptions, dir, name string, args ...string) (*childProc, error) {
	logPath := filepath.Join(dir, name+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(o.Exe, append(append([]string(nil), o.ExeArgs...), args...)...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	p := &childProc{name: name, cmd: cmd, logPath: logPath, log: out, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *childProc) pid() int { return p.cmd.Process.Pid }

// stop sends sig and waits up to grace for the exit, then kills. It
// returns the exit error of a signal-stopped child that did not exit
// cleanly (nil after a kill: that was the harness's doing).
func (p *childProc) stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("bench: %s did not exit within %v of %v; killed", p.name, grace, sig)
	}
}

// exitError is why a child that should be running is not, naming its log.
func (p *childProc) exitError() error {
	return fmt.Errorf("bench: %s exited (%v); its log: %s", p.name, p.err, p.logPath)
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free a moment
// ago (a child process listens on it next).
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// pollUntil calls ok every 20ms until it returns true, the child exits,
// limit passes or ctx ends.
func pollUntil(ctx context.Context, p *childProc, limit time.Duration, what string, ok func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if ok(ctx) {
			return nil
		}
		select {
		case <-p.exited:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("bench: %s: %s: %w (its log: %s)", p.name, what, ctx.Err(), p.logPath)
		case <-t.C:
		}
	}
}

// httpOK reports whether GET url answers 200.
func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// smppBinds reports whether a transceiver bind to addr with user/pass
// succeeds (and unbinds it).
func smppBinds(ctx context.Context, addr, user, pass string) bool {
	c, err := esme.Dial(ctx, addr, esme.Options{SystemID: user, Password: pass, Bind: smpp.BindTransceiver, Timeout: 2 * time.Second})
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.Unbind(ctx)
	return true
}

// procStatusKB reads a "VmHWM:"-style field of /proc/PID/status in kB
// (0 when unreadable, as on systems without /proc).
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return n
	}
	return 0
}

// simStats is what `smppproxy sim --stats` answers on GET /stats?per_key=0.
type simStats struct {
	Total      int64          `json:"total"`
	Duplicates map[string]int `json:"duplicates"`
	Receipts   struct {
		Attempts int `json:"attempts"`
		Accepted int `json:"accepted"`
	} `json:"receipts"`
}

func fetchSimStats(ctx context.Context, addr string) (simStats, error) {
	var s simStats
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/stats?per_key=0", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("bench: simulator stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("bench: simulator stats: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("bench: simulator stats: %w", err)
	}
	return s, nil
}
