package proxy

import (
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/config"
)

// Upstream session ids never repeat across runs of an instance whose id
// is configured (store.instance_id, the same for every run): each run
// adds a part of its own, so a record's journal (session, sequence) names
// one run. A drawn id (the default) is the run's own already.
func TestSessionIDsOfAConfiguredInstanceDifferFromRunToRun(t *testing.T) {
	cfg := &config.Config{Store: config.Store{InstanceID: "a"}}
	one, two := sessionInstance(cfg, "a"), sessionInstance(cfg, "a")
	if one == two || !strings.HasPrefix(one, "a.") || !strings.HasPrefix(two, "a.") || strings.Contains(one, "/") {
		t.Errorf("two runs of instance a: %q and %q; want a.<run>, different, without /", one, two)
	}
	drawn := &config.Config{}
	if got := sessionInstance(drawn, "host-0a1b2c"); got != "host-0a1b2c" {
		t.Errorf("a drawn instance id = %q; want it unchanged", got)
	}
}
