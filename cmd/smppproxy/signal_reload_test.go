package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
)

// A SIGTERM that comes while SIGHUP reloads wait (each for the one before
// to move its upstream to binds that do not come up, up to 30 s) is acted
// on at once: the proxy reports not ready and shuts down. (The signals
// were read by the loop that ran the reloads: the SIGTERM waited behind
// them, or, with two SIGHUPs queued, was dropped.)
func TestASIGTERMIsActedOnWhileReloadsWait(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	p := startOps(t, smsc.Addr(), opsOptions{})
	cfgPath := p.dir + "/proxy.yaml"
	rewrite(t, cfgPath, smsc.Addr(), "127.0.0.1:1") // binds that never come up
	mustCLI(t, "reload", "--admin", strings.TrimPrefix(p.adminURL, "http://"))
	for range 3 {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Well within the 30 s the waiting reloads would hold a SIGTERM back.
	if !testkit.Poll(20*time.Second, func() bool {
		resp, err := http.Get(p.adminURL + "/readyz")
		if err != nil {
			return true // the admin endpoint is gone: shut down
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}) {
		t.Fatal("the proxy still reported ready 20 s after SIGTERM, while reloads waited")
	}
	done := make(chan error, 1)
	go func() { _, err := p.cmd.Process.Wait(); done <- err }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the proxy did not exit after SIGTERM")
	}
}
