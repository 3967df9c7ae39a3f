package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownFiles are the README and every page under docs/, relative to the
// repository root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatalf("no pages under %s", filepath.Join(root, "docs"))
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		files = append(files, rel)
	}
	return files
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	autoLink   = regexp.MustCompile(`<(?i:https?|ftp|mailto):[^>]*>`)
	bareURL    = regexp.MustCompile(`(?i)\b(?:https?|ftp)://[^\s)>\]]+`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// prose is a Markdown file without its code blocks and code spans, where
// addresses are examples, not links.
func prose(md string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(md, ""), "")
}

// anchors are the fragment names GitHub gives a file's headings: lower
// case, punctuation but '-' and '_' dropped, spaces as '-', repeats
// numbered.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		h := strings.ToLower(htmlTag.ReplaceAllString(m[1], ""))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		for n, try := 1, a; ; n++ {
			if !out[try] {
				out[try] = true
				break
			}
			try = a + "-" + string(rune('0'+n))
		}
	}
	return out
}

// The README and docs/ link only to files of the repository, each of
// which exists, and to headings that exist; nothing links outside it.
func TestLinksStayInTheRepositoryAndResolve(t *testing.T) {
	root := repoRoot(t)
	texts := map[string]string{}
	for _, f := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(b)
	}
	checked := 0
	for f, md := range texts {
		p := prose(md)
		for _, m := range autoLink.FindAllString(p, -1) {
			t.Errorf("%s: %s links outside the repository", f, m)
		}
		for _, m := range bareURL.FindAllString(p, -1) {
			t.Errorf("%s: %s is an address outside the repository (write it as code if it is an example)", f, m)
		}
		for _, m := range inlineLink.FindAllStringSubmatch(p, -1) {
			target := m[1]
			checked++
			if strings.Contains(target, "://") || strings.HasPrefix(strings.ToLower(target), "mailto:") || strings.HasPrefix(target, "/") {
				t.Errorf("%s: link %q points outside the repository", f, target)
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				if file == ".." || strings.HasPrefix(file, ".."+string(filepath.Separator)) {
					t.Errorf("%s: link %q leaves the repository", f, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, file)); err != nil {
					t.Errorf("%s: link %q: no such file %s", f, target, file)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			md, ok := texts[file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, file))
				if err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
				md = string(b)
			}
			if !anchors(md)[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", f, target, file, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("found only %d links in the README and docs/: is the link pattern broken?", checked)
	}
}

func TestAnchorsFollowGitHub(t *testing.T) {
	md := "# Reload: what applies at once\n## `on_unknown`\n## The record's states\n## Tools: `sim`, `send`\n## A\n## A\n```\n# not a heading\n```\n"
	got := anchors(md)
	for _, want := range []string{"reload-what-applies-at-once", "on_unknown", "the-records-states", "tools-sim-send", "a", "a-1"} {
		if !got[want] {
			t.Errorf("anchors(...) has no %q; got %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("anchors(...) took a line of a code block for a heading")
	}
}
