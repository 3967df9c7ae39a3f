package proxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/internal/buildinfo"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
)

func TestBuildInfoMetricNamesTheRunningBuild(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	reg := prometheus.NewRegistry()
	app, err := New(Options{Config: testConfig(t, smsc.Addr(), t.TempDir()), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := buildinfo.Read()
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != want.Version || labels["goversion"] != want.GoVersion || labels["revision"] != want.ShortRevision() {
			t.Errorf("smppproxy_build_info = %v %v, want 1 with version %q, revision %q, goversion %q", m.GetGauge().GetValue(), labels, want.Version, want.ShortRevision(), want.GoVersion)
		}
		return
	}
	t.Fatal("no smppproxy_build_info metric registered")
}
