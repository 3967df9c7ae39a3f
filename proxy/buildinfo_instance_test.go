package proxy

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
)

// buildInfoInstance is the instance_id label of smppproxy_build_info in
// reg, and how many series the metric has.
func buildInfoInstance(t *testing.T, reg *prometheus.Registry) (string, int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_build_info" {
			continue
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if l.GetName() == "instance_id" {
				return l.GetValue(), len(mf.GetMetric())
			}
		}
		return "", len(mf.GetMetric())
	}
	t.Fatal("no smppproxy_build_info metric registered")
	return "", 0
}

// smppproxy_build_info names the instance (one series per process):
// store.instance_id when set, else a name of the host and the run.
func TestBuildInfoMetricNamesTheInstance(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	for _, configured := range []string{"edge-1", ""} {
		cfg := testConfig(t, smsc.Addr(), t.TempDir())
		cfg.Store.InstanceID = configured
		reg := prometheus.NewRegistry()
		app, err := New(Options{Config: cfg, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		got, series := buildInfoInstance(t, reg)
		app.Close()
		switch {
		case series != 1:
			t.Errorf("smppproxy_build_info has %d series, want 1", series)
		case configured != "" && got != configured:
			t.Errorf("instance_id = %q with store.instance_id %q, want it", got, configured)
		case configured == "" && (got == "" || strings.Contains(got, "/")):
			t.Errorf("instance_id = %q without store.instance_id, want the host name and a suffix", got)
		}
	}
}
