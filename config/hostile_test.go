package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mergeBomb is a small file whose merges expand one mapping of unknown
// keys 9^levels times: walked in full it reports every key of
// every expansion.
func mergeBomb(keys, levels int) string {
	var m []string
	for i := range keys {
		m = append(m, fmt.Sprintf("k%d: 1", i))
	}
	var b strings.Builder
	b.WriteString("z:\n  - &l0 {" + strings.Join(m, ", ") + "}\n")
	for l := 1; l <= levels; l++ {
		fmt.Fprintf(&b, "  - &l%d {<<: [%s]}\n", l, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", l-1), 9), ","))
	}
	fmt.Fprintf(&b, "listen: *l%d\n", levels)
	return b.String()
}

// A hostile or mistaken file costs bounded work: the problems reported stop
// at MaxErrors (one more says so), however far its aliases expand.
func TestParseOfAnAliasBombReportsABoundedNumberOfProblems(t *testing.T) {
	data := mergeBomb(40, 4) // 9^4 × 40 = 262,440 unknown keys when expanded
	_, err := Parse([]byte(data), "bomb.yaml")
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse = %v, want *Errors", err)
	}
	// The walk reports at most MaxErrors and one saying it stopped; the
	// checks of the (default) values decoded so far add a few.
	if n := len(errs.List); n > 2*MaxErrors {
		t.Fatalf("Parse reported %d problems, want at most about %d", n, MaxErrors+1)
	}
	stopped := false
	for _, e := range errs.List {
		stopped = stopped || strings.Contains(e.Msg, "too many")
	}
	if !stopped {
		t.Errorf("no problem says the walk stopped (too many ...): %v", err)
	}
}

// Past MaxFileSize a file is refused before it is parsed.
func TestLoadRefusesAFileLargerThanMaxFileSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	pad := strings.Repeat("# padding padding padding padding padding padding padding\n", MaxFileSize/58+1)
	if err := os.WriteFile(path, []byte(base+pad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]byte(base+"# small\n"), "t.yaml"); err != nil {
		t.Fatalf("the same configuration without padding: %v", err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load of a %d-byte file = %v, want an error saying it is larger than %d bytes", len(base+pad), err, MaxFileSize)
	}
	_, err = Parse([]byte(base+pad), "big.yaml")
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Parse of %d bytes = %v, want an error saying it is larger than %d bytes", len(base+pad), err, MaxFileSize)
	}
}

// A list longer than MaxListItems is one problem, not one check per item:
// 262,000 empty accounts in 1 MiB cost seconds of checks and millions of
// problems.
func TestParseRefusesAListLongerThanMaxListItems(t *testing.T) {
	data := "accounts: [" + strings.Repeat("{}, ", MaxListItems) + "{}]\n"
	_, err := Parse([]byte(data), "long.yaml")
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse = %v, want *Errors", err)
	}
	if n := len(errs.List); n > MaxErrors {
		t.Fatalf("Parse reported %d problems, want a few", n)
	}
	found := false
	for _, e := range errs.List {
		found = found || e.Path == "accounts" && strings.Contains(e.Msg, "at most")
	}
	if !found {
		t.Fatalf("no problem at accounts says the list is too long: %v", err)
	}
	// At the limit, the items are decoded and checked as usual.
	ok := "accounts: [" + strings.Repeat("{}, ", MaxListItems-1) + "{}]\n"
	if _, err := Parse([]byte(ok), "ok.yaml"); err == nil || strings.Contains(err.Error(), "at most") {
		t.Fatalf("Parse of %d accounts = %v, want the items' own problems only", MaxListItems, err)
	}
}
