package archtest

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The limits of STYLE.md for every function outside tests.
const (
	maxParams = 6
	maxLines  = 80
)

const allowlistFile = "testdata/funcsize_allowlist.txt"

var update = flag.Bool("update", false, "rewrite "+allowlistFile+" from the code (review the diff: it may only shrink)")

// size is what the check measures of one function.
type size struct {
	params, lines int
}

func (s size) violates() bool { return s.params > maxParams || s.lines > maxLines }

// funcSizes measures every function and method declared in a non-test .go
// file of the module, keyed "dir.Name" or "dir.(*Recv).Name" (dir relative
// to the module root; a second declaration of one name, as init, gets
// "#2"). Lines run from the func keyword to the closing brace.
func funcSizes(t *testing.T) map[string]size {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	out := map[string]size{}
	for _, p := range files {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := filepath.ToSlash(dir) + "." + funcName(fn)
			for n := 2; ; n++ {
				if _, dup := out[key]; !dup {
					break
				}
				key = strings.TrimSuffix(key, "#"+strconv.Itoa(n-1)) + "#" + strconv.Itoa(n)
			}
			out[key] = size{
				params: countFields(fn.Type.Params),
				lines:  fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1,
			}
		}
	}
	if len(out) < 100 {
		t.Fatalf("found only %d functions under %s", len(out), root)
	}
	return out
}

// funcName is Name, or (Recv).Name / (*Recv).Name for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	name := "?"
	if id, ok := typ.(*ast.Ident); ok {
		name = id.Name
	}
	return "(" + star + name + ")." + fn.Name.Name
}

// countFields counts parameters: one per name, one per unnamed field.
func countFields(l *ast.FieldList) int {
	n := 0
	if l == nil {
		return 0
	}
	for _, f := range l.List {
		n += max(1, len(f.Names))
	}
	return n
}

// readAllowlist reads lines "key params=P lines=L".
func readAllowlist(t *testing.T) map[string]size {
	t.Helper()
	f, err := os.Open(allowlistFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]size{}
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var key string
		var s size
		if _, err := fmt.Sscanf(line, "%s params=%d lines=%d", &key, &s.params, &s.lines); err != nil {
			t.Fatalf("%s:%d: %q: %v", allowlistFile, ln, line, err)
		}
		out[key] = s
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeAllowlist(t *testing.T, got map[string]size) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# Functions over %d parameters or %d lines, with their size today.\n", maxParams, maxLines)
	b.WriteString("# Checked by TestNoFunctionOverSixParamsOrEightyLines: the list may only shrink.\n")
	var keys []string
	for k, s := range got {
		if s.violates() {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s params=%d lines=%d\n", k, got[k].params, got[k].lines)
	}
	if err := os.WriteFile(allowlistFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// No function outside tests takes more than 6 parameters or spans more
// than 80 lines, except today's violators in the allowlist; those may not
// grow, and an entry that no longer violates must be removed.
func TestNoFunctionOverSixParamsOrEightyLines(t *testing.T) {
	got := funcSizes(t)
	if *update {
		writeAllowlist(t, got)
	}
	allowed := readAllowlist(t)
	t.Logf("allowlist: %d functions over %d parameters or %d lines", len(allowed), maxParams, maxLines)
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := got[k]
		a, listed := allowed[k]
		switch {
		case !s.violates():
		case !listed:
			t.Errorf("%s has %d parameters and %d lines, want at most %d and %d", k, s.params, s.lines, maxParams, maxLines)
		case s.params > max(a.params, maxParams) || s.lines > max(a.lines, maxLines):
			t.Errorf("%s grew to %d parameters and %d lines; the allowlist has %d and %d, and may only shrink", k, s.params, s.lines, a.params, a.lines)
		case s.params < a.params || s.lines < a.lines:
			t.Logf("%s shrank to params=%d lines=%d: lower its entry in %s", k, s.params, s.lines, allowlistFile)
		}
	}
	for k, a := range allowed {
		if s, ok := got[k]; !ok || !s.violates() {
			t.Errorf("allowlist entry %s (params=%d lines=%d) is no longer a violator (now %+v, found %v): remove it", k, a.params, a.lines, s, ok)
		}
	}
}
