// Package deploy_test checks the packaging files of deploy/ against the
// code: every metric the Grafana dashboard and the Prometheus alert rules
// query is one the proxy exports (metrics_test.go), the dashboard is
// importable with its data source as a variable, every alert has a
// promtool test that makes it fire and one that does not, and the example
// configurations load and agree with the systemd unit and the Dockerfile
// (files_test.go). The directory holds no Go code besides these tests.
package deploy_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/proxy"
)

// notExported are metrics the dashboard or the alert rules may query
// although the proxy built here does not export them, each with its reason.
// An entry the proxy does export, or that nothing queries, fails the test:
// the list only holds what it must.
var notExported = map[string]string{
	// Exported with the PostgreSQL store (store.backend: postgres) only;
	// the Badger store has no lease. Used by the alert
	// SmppproxyStoreLeaseLost and the dashboard's "Store lease held" stat.
	"smppproxy_store_lease_held": "exported by the PostgreSQL store only",
	// Written by Prometheus itself for every scrape target.
	"up": "a Prometheus series, not an exported metric",
}

// recorder is a Registerer that notes the name of every metric a
// collector describes before registering it: a vector with no series yet
// is absent from Gather but present in its description.
type recorder struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedMetrics builds the registry the way `smppproxy serve` does (Go
// and process collectors, then proxy.New on a Badger store with an SMSC
// simulator as upstream) and returns the names of every metric described
// or gathered.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &recorder{Registerer: reg, names: map[string]bool{}}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	proxytest.Start(t, func(cfg *config.Config) (*proxy.App, error) {
		return proxy.New(proxy.Options{Config: cfg, Registerer: rec})
	}, proxytest.WithSim(sim.Config{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		rec.names[f.GetName()] = true
	}
	if !rec.names["smppproxy_dedup_submits_total"] || !rec.names["process_resident_memory_bytes"] {
		t.Fatalf("the registry lacks smppproxy_dedup_submits_total or process_resident_memory_bytes; names read: %d", len(rec.names))
	}
	return rec.names
}

// histogramSuffixes are the series a histogram or summary adds to its name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// unknownMetrics returns, sorted, the names of queried (name → where it
// is queried) that are neither exported (allowing a histogram's series
// suffixes) nor in allowed.
func unknownMetrics(queried map[string][]string, exported map[string]bool, allowed map[string]string) []string {
	var out []string
	for name, where := range queried {
		if exported[name] || allowed[name] != "" {
			continue
		}
		found := false
		for _, s := range histogramSuffixes {
			if base, ok := strings.CutSuffix(name, s); ok && exported[base] {
				found = true
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s (queried by %s)", name, strings.Join(where, "; ")))
		}
	}
	sort.Strings(out)
	return out
}

// Every metric the dashboard and the alert rules query is one the proxy
// exports, or is listed in notExported with its reason; and every entry of
// notExported is still needed.
func TestEveryQueriedMetricIsExported(t *testing.T) {
	queried := map[string][]string{}
	for _, q := range append(dashboardQueries(t), alertQueries(t)...) {
		if strings.Contains(q.expr, "__name__") {
			t.Errorf("%s selects by __name__, which this test cannot check: name the metric", q.where)
		}
		for _, n := range metricNames(q.expr) {
			queried[n] = append(queried[n], q.where)
		}
	}
	if len(queried) < 20 {
		t.Fatalf("found only %d metric names in the dashboard and the rules: is the extraction broken?", len(queried))
	}
	exported := exportedMetrics(t)
	for _, u := range unknownMetrics(queried, exported, notExported) {
		t.Errorf("%s: the proxy does not export it", u)
	}
	for name, why := range notExported {
		if exported[name] {
			t.Errorf("notExported lists %s (%s), but the proxy exports it: remove the entry", name, why)
		}
		if queried[name] == nil {
			t.Errorf("notExported lists %s, which nothing queries: remove the entry", name)
		}
	}
}

// A made-up metric is reported, wherever it hides in an expression; a
// histogram's series are found by their base name.
func TestUnknownMetricsReportsAMadeUpName(t *testing.T) {
	exported := map[string]bool{"smppproxy_upstream_request_seconds": true, "smppproxy_esme_connections": true}
	queried := map[string][]string{}
	for _, expr := range []string{
		`histogram_quantile(0.99, sum by (le) (rate(smppproxy_upstream_request_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`,
		`smppproxy_esme_connections / on (instance) group_left smppproxy_made_up_total`,
	} {
		for _, n := range metricNames(expr) {
			queried[n] = append(queried[n], "test")
		}
	}
	got := unknownMetrics(queried, exported, nil)
	if want := []string{"smppproxy_made_up_total (queried by test)"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("unknownMetrics = %q, want %q", got, want)
	}
}
