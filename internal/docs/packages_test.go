package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/config"
)

// packageDirs are the directories of the module holding Go files (test
// files included: a package of tests only is a package too), relative to
// the root, with '/' separators.
func packageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

var backticked = regexp.MustCompile("`([^`]+)`")

// tablePackages are the packages named in the package column of the
// architecture page's table (the one whose header is "| layer | package |").
func tablePackages(t *testing.T, md string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	in := false
	for _, line := range strings.Split(md, "\n") {
		cells := strings.Split(line, "|")
		switch {
		case !in && len(cells) > 3 && strings.TrimSpace(cells[1]) == "layer" && strings.TrimSpace(cells[2]) == "package":
			in = true
		case in && !strings.HasPrefix(strings.TrimSpace(line), "|"):
			return out
		case in && len(cells) > 3:
			for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
				out[m[1]] = true
			}
		}
	}
	if !in {
		t.Fatal(`docs/architecture.md has no table with the header "| layer | package |"`)
	}
	return out
}

// Every package of the module has a row in the package table of
// docs/architecture.md, so the table a reader trusts is complete.
func TestEveryPackageIsInTheArchitectureTable(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := tablePackages(t, string(b))
	dirs := packageDirs(t, root)
	if len(dirs) < 10 || len(named) < 10 {
		t.Fatalf("found %d package directories and %d packages in the table: is the walk or the table parse broken?", len(dirs), len(named))
	}
	for _, d := range dirs {
		if d == "." {
			continue
		}
		if !named[d] {
			t.Errorf("package %s is not in the package table of docs/architecture.md: add a row saying what it owns", d)
		}
	}
}

func TestTablePackagesReadsThePackageColumnOnly(t *testing.T) {
	md := "x\n\n| layer | package | owns | may import |\n|---|---|---|---|\n| leaves | `smpp` | the `wire` | — |\n| | `esme`, `sim` | tools | `smpp` |\n\n| layer | `other` |\n"
	got := tablePackages(t, md)
	want := map[string]bool{"smpp": true, "esme": true, "sim": true}
	if len(got) != len(want) {
		t.Fatalf("tablePackages = %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("tablePackages = %v, want %v", got, want)
		}
	}
}

// The quick start's configuration loads and validates, and points at the
// simulator's default address, as the README's three commands assume.
func TestQuickStartConfigurationLoads(t *testing.T) {
	cfg, err := config.Load(filepath.Join(repoRoot(t), "docs", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Listen.Address; got != "127.0.0.1:2775" {
		t.Errorf("listen.address = %q, want 127.0.0.1:2775 (the README's send --target)", got)
	}
	if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].Address != "127.0.0.1:2776" {
		t.Errorf("upstreams = %+v, want one on 127.0.0.1:2776 (smppproxy sim's default)", cfg.Upstreams)
	}
	if a := cfg.Account("shop"); a == nil || a.Password != "secret1" {
		t.Errorf("account shop with password secret1 (the README's send) not found")
	}
}
