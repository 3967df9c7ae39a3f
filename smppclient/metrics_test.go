package smppclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/smpp"
)

// instrumented starts a fake SMSC that answers submits with onSubmit, a
// pool bound to it and its metrics in a registry of their own, and
// returns the instrumented pool and the registry.
func instrumented(t *testing.T, onSubmit func(c *fakeConn, h smpp.Header, body []byte)) (*InstrumentedPool, *prometheus.Registry) {
	t.Helper()
	f := startFake(t)
	f.onSubmit = onSubmit
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	m := NewMetrics(p)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	return m.Instrument(p), reg
}

// responsesHead is the exposition's header of the responses counter.
const responsesHead = `
# HELP smppproxy_upstream_responses_total Responses to forwarded requests by upstream and SMPP status name ("other" for a status outside the SMPP status table).
# TYPE smppproxy_upstream_responses_total counter
`

// An instrumented pool observes each answered request once, by status, and
// still runs the caller's beforeWrite; the pool's counters are pulled at
// scrape time.
func TestMetricsInstrumentAndCollect(t *testing.T) {
	ip, reg := instrumented(t, func(c *fakeConn, h smpp.Header, _ []byte) {
		st := smpp.StatusOK
		if h.Sequence == 2 {
			st = smpp.StatusThrottled
		}
		time.Sleep(2 * time.Millisecond) // deliberately slow: the latency histogram must see ≥2ms
		c.answer(h, st)
	})

	journaled := 0
	for range 3 {
		if _, err := ip.Submit(context.Background(), "", submitFrame, func(string, uint32) error { journaled++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	refused := errors.New("journal refused")
	if _, err := ip.Submit(context.Background(), "", submitFrame, func(string, uint32) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Submit with a failing beforeWrite = %v", err)
	}
	if journaled != 3 {
		t.Fatalf("beforeWrite called %d times, want 3", journaled)
	}
	want := responsesHead + `smppproxy_upstream_responses_total{status="ESME_ROK",upstream="up"} 2
smppproxy_upstream_responses_total{status="ESME_RTHROTTLED",upstream="up"} 1
# HELP smppproxy_upstream_requests_written_total Requests written to the upstream.
# TYPE smppproxy_upstream_requests_written_total counter
smppproxy_upstream_requests_written_total{upstream="up"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "smppproxy_upstream_responses_total", "smppproxy_upstream_requests_written_total"); err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "smppproxy_upstream_request_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.006 {
				t.Fatalf("latency histogram: %d samples, sum %v; want 3 samples of ≥2ms", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	sessions := `
# HELP smppproxy_upstream_sessions Upstream binds by upstream, bind type and state (connecting, bound).
# TYPE smppproxy_upstream_sessions gauge
smppproxy_upstream_sessions{bind="transceiver",state="bound",upstream="up"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(sessions), "smppproxy_upstream_sessions"); err != nil {
		t.Fatalf("sessions series, want one (transceiver, bound): %v", err)
	}
}

// Statuses outside the SMPP status table (vendor codes, garbage) share the
// label value "other", so a misbehaving SMSC cannot grow the label set of
// responses_total; known statuses keep their name.
func TestUnknownUpstreamStatusesShareOneMetricLabel(t *testing.T) {
	ip, reg := instrumented(t, func(c *fakeConn, h smpp.Header, _ []byte) {
		st := smpp.Status(0x0400_0000 + h.Sequence) // a new vendor status each time
		if h.Sequence == 1 {
			st = smpp.StatusThrottled
		}
		c.answer(h, st)
	})
	for range 20 {
		if _, err := ip.Submit(context.Background(), "", submitFrame, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := responsesHead + `smppproxy_upstream_responses_total{status="ESME_ROK",upstream="up"} 0
smppproxy_upstream_responses_total{status="ESME_RTHROTTLED",upstream="up"} 1
smppproxy_upstream_responses_total{status="other",upstream="up"} 19
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "smppproxy_upstream_responses_total"); err != nil {
		t.Fatal(err)
	}
}
