package proxy

import (
	"regexp"
	"testing"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// message_id: proxy issues ids of the configured format and length, and
// replays them to retries.
func TestProxyIssuedIDsFollowTheConfiguredStyle(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	cfg.Accounts[0].MessageID = config.MessageIDProxy
	cfg.Accounts[0].ProxyID = config.ProxyIDStyle{Format: config.IDDec, Length: 12}
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	r := c.submit(1, keyed("pid-1", "x"))
	if r.Status != 0 || !regexp.MustCompile(`^[1-9][0-9]{11}$`).MatchString(r.ID) {
		t.Fatalf("proxy-issued id = %q (status %v), want 12 decimal digits", r.ID, r.Status)
	}
	if again := c.submit(2, keyed("pid-1", "x")); again.ID != r.ID {
		t.Errorf("retry got %q, want the same proxy id %q", again.ID, r.ID)
	}
}
