package proxy

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
)

// A client's unbind waits for its submits at least as long as one may be
// handled: a forward over the slowest upstream, or a retry's wait for the
// submit in flight. From review: it waited a fixed 30 s, and an upstream
// whose response_timeout is longer had the unbind_resp sent before the
// submit's answer, which was lost.
func TestAClientsUnbindWaitsAsLongAsASubmitMayBeHandled(t *testing.T) {
	cfg := testConfig(t, "127.0.0.1:1", t.TempDir())
	if got := unbindWait(cfg); got < 30*time.Second {
		t.Errorf("unbindWait with the test's timeouts = %v, want at least 30s", got)
	}
	cfg.Upstreams[0].ResponseTimeout = config.Duration(40 * time.Second)
	cfg.Upstreams[0].Retry.Budget = 0
	if got, forward := unbindWait(cfg), longestForward(cfg); got <= forward || forward < 40*time.Second {
		t.Errorf("unbindWait with a 40s response_timeout = %v, want more than the longest forward %v", got, forward)
	}
	cfg.Accounts[0].Idempotency.InflightWait = config.Duration(90 * time.Second)
	if got := unbindWait(cfg); got <= 90*time.Second {
		t.Errorf("unbindWait with a 90s inflight_wait = %v, want more", got)
	}
}
