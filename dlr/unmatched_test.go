package dlr

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// An upstream that sends receipts matching no record cannot grow its
// unmatched queue past UnmatchedMax: the oldest are evicted (counted, per
// upstream), the newest kept, every receipt is still acknowledged, and
// other upstreams' kept receipts are untouched.
func TestUnmatchedReceiptsAreBoundedPerUpstreamOldestFirst(t *testing.T) {
	const max, sent = 5, 40
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) {
		c.UnmatchedMax = max
		c.Registerer = reg
		c.Upstreams["other"] = Upstream{}
	})
	deliver := func(up, id string) {
		t.Helper()
		st := e.svc.OnDeliver(bg, smppclient.Delivery{Upstream: up, Session: up + "/1", Frame: dlrFrame(id, "DELIVRD")})
		if st != smpp.StatusOK {
			t.Fatalf("OnDeliver(unmatched receipt %s from %s) = %v, want 0", id, up, st)
		}
	}
	deliver("other", "9001")
	deliver("other", "9002")
	for i := range sent {
		deliver("smsc", fmt.Sprint(2000+i))
	}
	if got := e.svc.Count(OutUnmatched); got != sent+2 {
		t.Fatalf("Count(unmatched) = %d, want %d", got, sent+2)
	}
	ids := func(up string) []string {
		var out []string
		for _, q := range queued(t, e.st, unmatchedQueue(up)) {
			out = append(out, q.MessageID)
		}
		return out
	}
	// The evictor counts a round once its deletions are done.
	waitFor(t, "evictions counted", func() bool { return e.svc.Count(CountUnmatchedEvicted) >= sent-max })
	var want []string
	for i := sent - max; i < sent; i++ {
		want = append(want, fmt.Sprint(2000+i))
	}
	if got := ids("smsc"); !slices.Equal(got, want) {
		t.Errorf("unmatched receipts kept for smsc = %v, want the newest %v", got, want)
	}
	if got := ids("other"); !slices.Equal(got, []string{"9001", "9002"}) {
		t.Errorf("unmatched receipts kept for other = %v, want both", got)
	}
	if got := e.svc.Count(CountUnmatchedEvicted); got != sent-max {
		t.Errorf("Count(%s) = %d, want %d", CountUnmatchedEvicted, got, sent-max)
	}
	if got := testutil.ToFloat64(e.svc.bound.evicted.WithLabelValues("smsc")); got != sent-max {
		t.Errorf("smppproxy_receipts_unmatched_evicted_total{upstream=smsc} = %v, want %d", got, sent-max)
	}
	if n, err := testutil.GatherAndCount(reg, "smppproxy_receipts_unmatched_evicted_total"); err != nil || n != 1 {
		t.Errorf("registered evicted series = %d, %v; want 1 (smsc)", n, err)
	}
}
