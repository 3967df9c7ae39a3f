package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestInfoNamesVersionCommitAndGo(t *testing.T) {
	in := fromBuildInfo(&debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/smppproxy/smppproxy", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	})
	want := "v0.4.0 (commit 0123456789ab+dirty, 2026-12-01T10:00:00Z, go1.26.8)"
	if got := in.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestInfoWithoutVCSSaysUnknown(t *testing.T) {
	in := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8"})
	if in.Version != "(devel)" || in.ShortRevision() != "unknown" || !strings.Contains(in.String(), "go1.26.8") {
		t.Errorf("no VCS info: %+v -> %q, want (devel), commit unknown, the Go version", in, in.String())
	}
}

func TestReadReportsTheRunningGo(t *testing.T) {
	if got := Read(); !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("Read().GoVersion = %q, want the running Go version", got.GoVersion)
	}
}
