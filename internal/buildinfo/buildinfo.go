// Package buildinfo says which build of smppproxy is running: the module
// version, the VCS revision and time the binary was built from, and the Go
// version, read from the binary itself (runtime/debug.ReadBuildInfo). It
// feeds `smppproxy --version` and the smppproxy_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Info describes a build. Empty fields were not recorded (a `go run`, a
// build without VCS information).
type Info struct {
	Version   string // module version: "v1.2.3", or "(devel)"
	Revision  string // VCS commit
	Time      string // VCS commit time, RFC 3339
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// ShortRevision is the first 12 characters of the revision, with
// "+dirty" when the tree was modified; "unknown" when not recorded.
func (in Info) ShortRevision() string {
	r := in.Revision
	if r == "" {
		return "unknown"
	}
	if len(r) > 12 {
		r = r[:12]
	}
	if in.Modified {
		r += "+dirty"
	}
	return r
}

// String is the one-line form `smppproxy --version` prints:
// "v1.2.3 (commit 0123456789ab, 2026-12-01T10:00:00Z, go1.26.8)".
func (in Info) String() string {
	parts := []string{"commit " + in.ShortRevision()}
	if in.Time != "" {
		parts = append(parts, in.Time)
	}
	parts = append(parts, in.GoVersion)
	return in.Version + " (" + strings.Join(parts, ", ") + ")"
}
