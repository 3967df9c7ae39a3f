package proxy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// SPEC §6: all segments of one message go to the same upstream while it
// is up. A segment whose first try meets a temporary error (0x14) is
// retried inside the proxy on its message's upstream, and the segments
// after it follow too — with two upstreams of equal weight, both up.
func TestSegmentRetriedOnItsMessageUpstreamAfterATemporaryError(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // destination → upstream of every arrival, in order
	hook := func(name string) func(sim.Call) sim.Action {
		return func(c sim.Call) sim.Action {
			msg := string(c.Submit.DstAddr)
			mu.Lock()
			defer mu.Unlock()
			seen[msg] = append(seen[msg], name)
			if c.Submit.Segment().Seq == 2 && len(seen[msg]) == 2 {
				return sim.Action{Status: smpp.StatusMsgQFul} // the second segment's first try
			}
			return sim.Action{}
		}
	}
	simA := startSim(t, sim.Config{Fault: hook("a")})
	simB := startSim(t, sim.Config{Fault: hook("b")})
	cfg := routeConfig(t, []int{1, 1}, simA, simB)
	app := startProxy(t, cfg)
	waitFor(t, 5*time.Second, "every bind up", func() bool { return boundTo(app, "a") == 2 && boundTo(app, "b") == 2 })
	c := dialClients(t, app.Addr(), "shop", "secret", 1, 10)[0]

	const messages, parts = 20, 3
	for m := range messages {
		for p := byte(1); p <= parts; p++ {
			r, err := c.Submit(t.Context(), esme.Submit{
				Src: "SHOP", Dst: fmt.Sprintf("44770091%04d", m), Key: fmt.Sprintf("seg-%d-%d", m, p),
				UDH:  []byte{0x05, 0x00, 0x03, byte(m), parts, p},
				Text: []byte(fmt.Sprintf("part %d of message %d", p, m)),
			})
			if err != nil || r.Status != 0 {
				t.Fatalf("message %d segment %d = %+v, %v; want accepted after the in-proxy retry", m, p, r, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for msg, ups := range seen {
		if len(ups) != parts+1 {
			t.Errorf("message %s: %d arrivals at the SMSCs, want %d (one retry)", msg, len(ups), parts+1)
			continue
		}
		for _, u := range ups[1:] {
			if u != ups[0] {
				t.Errorf("message %s: arrivals at %v, want every one at its message's upstream", msg, ups)
				break
			}
		}
	}
}
