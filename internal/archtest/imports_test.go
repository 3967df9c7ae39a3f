package archtest

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/smppproxy/smppproxy"

// layers lists, for every package of the module (path relative to the
// module root), the project packages its non-test files may import. It
// draws the layering of STYLE.md, bottom to top:
//
//	smpp, logx, msgid, internal/clock   leaves: wire format, log helpers,
//	                                    message ids, the pause
//	config                              the schema, on smpp (its enums)
//	smppserver, smppclient, state,      the edges, on smpp
//	session
//	dedup, route, dlr, querycancel      the middle: decide, forward, receipts,
//	                                    query_sm/cancel_sm
//	internal/peer/{esme,sim},           test and tool support (a client, an
//	internal/proxytest                  SMSC, a proxy on loopback)
//	proxy, admin                        wiring and the operator surface
//	cmd/smppproxy                       the command, on top
//
// No package imports one above it. A package missing from this table
// fails the test: add it, at its layer. Imports that break the intended
// layering today are listed in exceptions, not here.
var layers = map[string][]string{
	"smpp": nil,
	"logx": nil,
	// buildinfo reads the binary's version (--version, the build_info metric).
	"internal/buildinfo": nil,
	// varcodec is the stores' binary encoding (varints, strings, times).
	"internal/varcodec": nil,
	// sdnotify tells systemd the service's state (READY=1, STOPPING=1…).
	"internal/sdnotify": nil,
	// clock is the one pause that a context's end cuts short.
	"internal/clock": nil,
	// msgid reads and issues message ids for dedup (submit) and dlr
	// (receipts).
	"msgid": nil,
	// smpptest builds frames for tests and tools (a submit_sm from its parts).
	"smpp/smpptest": {"smpp"},
	// config may name the wire's enums (smpp.BindType) in its schema.
	"config": {"smpp"},

	"smppserver":      {"smpp", "logx"},
	"smppclient":      {"smpp", "logx", "internal/clock"},
	"state":           {"smpp", "logx", "internal/varcodec"},
	"state/storetest": {"state", "smpp", "internal/testkit"},
	"session":         {"smpp", "logx"},
	// pgstore is the PostgreSQL backend of state.Store and state.Queue.
	"pgstore": {"state", "internal/varcodec"},

	// dedup is a middleware of smppserver's handler chain and forwards
	// through its own Forwarder interface, so it needs no smppclient; its
	// policies' enums are config's.
	"dedup": {"smpp", "logx", "config", "smppserver", "state"},
	"route": {"smpp", "logx", "internal/clock", "smppclient", "state"},
	"dlr":   {"smpp", "logx", "msgid", "smppserver", "smppclient", "state"},
	// querycancel is the query_sm/cancel_sm link of smppserver's chain.
	"querycancel": {"smpp", "logx", "msgid", "smppserver", "smppclient", "state"},

	// The SMPP peers the proxy is tested and benchmarked against (and the
	// CLI's send, sim and bench tools): a client and an SMSC simulator.
	"internal/peer/esme": {"smpp", "logx"},
	"internal/peer/sim":  {"smpp", "logx", "smppserver"},
	// proxytest starts a sim SMSC and a proxy for tests; it takes the
	// proxy's constructor, so proxy's own tests can use it.
	"internal/proxytest": {"config", "internal/peer/sim"},

	"proxy": {"internal/buildinfo", "internal/clock", "pgstore", "smpp", "logx", "msgid", "config", "smppserver", "smppclient", "state", "session", "dedup", "route", "dlr", "querycancel"},
	"admin": {"smpp", "logx", "config", "state", "session", "dedup", "route", "dlr"},

	// The command wires everything; bench, demo and sim are tools built
	// on the test-support packages.
	"cmd/smppproxy": {"internal/buildinfo", "internal/sdnotify", "pgstore", "smpp", "logx", "msgid", "config", "smppserver", "smppclient", "state", "session", "dedup", "route", "dlr", "querycancel", "proxy", "admin", "internal/peer/esme", "internal/peer/sim"},

	// Packages of tests only: their non-test files import nothing.
	// deploy checks the packaging files (dashboard, alert rules, example
	// configurations) against the proxy's metrics and config schema.
	"deploy":            nil,
	"interop":           nil,
	"internal/docs":     nil,
	"internal/archtest": nil,
	"internal/testkit":  nil,
	// pgtest gives PostgreSQL tests their database and a schema each.
	"internal/pgtest": nil,
}

// exceptions are imports that break the layering of the table today. Each
// is kept until the code is changed; an exception no longer used fails the
// test, so the list only shrinks.
var exceptions = map[string][]string{
	// route implements dedup.Forwarder and classifies dedup.Result: the
	// forwarder's contract lives in the layer that calls it.
	"route": {"dedup"},
}

// projectImports returns, per package directory of the module (relative
// path), the project packages its non-test files import.
func projectImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		var own []string
		for _, imp := range pkg.Imports {
			if after, ok := strings.CutPrefix(imp, module+"/"); ok {
				own = append(own, after)
			}
		}
		out[rel] = own
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages under %s", len(out), root)
	}
	return out
}

// No package imports a project package its layer may not use.
func TestPackagesImportOnlyTheLayersBelow(t *testing.T) {
	used := map[string]bool{} // "pkg → imp" of exceptions seen
	got := projectImports(t)
	pkgs := make([]string, 0, len(got))
	for p := range got {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		allowed, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s is not in the layering table (internal/archtest/imports_test.go): add it at its layer", pkg)
			continue
		}
		for _, imp := range got[pkg] {
			switch {
			case slices.Contains(allowed, imp):
			case slices.Contains(exceptions[pkg], imp):
				used[pkg+" → "+imp] = true
			default:
				t.Errorf("forbidden import: %s imports %s; its layer may import only %v", pkg, imp, allowed)
			}
		}
	}
	for pkg, imps := range exceptions {
		for _, imp := range imps {
			if !used[pkg+" → "+imp] {
				t.Errorf("exception %s → %s is no longer used: remove it from the exceptions table", pkg, imp)
			}
		}
	}
}

// The table itself points only down: no package may import one that may
// import it back, and every name in it is a package of the table.
func TestLayeringTableHasNoCycle(t *testing.T) {
	for pkg, allowed := range layers {
		for _, imp := range append(slices.Clone(allowed), exceptions[pkg]...) {
			below, ok := layers[imp]
			if !ok {
				t.Errorf("layers[%q] allows %q, which is not in the table", pkg, imp)
				continue
			}
			if slices.Contains(below, pkg) {
				t.Errorf("layers allow both %s → %s and %s → %s", pkg, imp, imp, pkg)
			}
		}
	}
}
