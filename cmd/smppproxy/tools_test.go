package main

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/smppproxy/smppproxy/internal/buildinfo"
)

// runWithInput runs an smppproxy command in process with stdin in and
// returns what it printed on stdout and on stderr.
func runWithInput(t *testing.T, in string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(in), &out, &errOut
	err := app.Run(append([]string{"smppproxy"}, args...))
	return out.String(), errOut.String(), err
}

func TestVersionFlagAndCommandPrintTheBuildLine(t *testing.T) {
	want := buildinfo.Read().String() + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if got := mustCLI(t, args...); got != want {
			t.Errorf("smppproxy %v = %q, want %q", args, got, want)
		}
	}
}

// hash-password prints the hash alone, one the configuration accepts and
// bcrypt verifies, at the cost asked; it refuses an empty password and one
// bcrypt cannot hash whole (over 72 bytes).
func TestHashPasswordPrintsOnlyAVerifiableHash(t *testing.T) {
	out, _, err := runWithInput(t, "s3cret\n", "hash-password", "--cost", "4")
	if err != nil {
		t.Fatal(err)
	}
	h := strings.TrimSuffix(out, "\n")
	if strings.Contains(h, "\n") || strings.Contains(out, "s3cret") {
		t.Fatalf("output %q: want the hash alone", out)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret")); err != nil {
		t.Fatalf("hash %q does not verify the password: %v", h, err)
	}
	if c, _ := bcrypt.Cost([]byte(h)); c != 4 {
		t.Errorf("cost %d, want 4", c)
	}
	if out, _, _ := runWithInput(t, "s3cret", "hash-password", "--cost", "4"); bcrypt.CompareHashAndPassword([]byte(strings.TrimSpace(out)), []byte("s3cret")) != nil {
		t.Errorf("without a final newline: %q does not verify", out)
	}
	if out, _, _ := runWithInput(t, "s3cret\r\n", "hash-password", "--cost", "4"); bcrypt.CompareHashAndPassword([]byte(strings.TrimSpace(out)), []byte("s3cret")) != nil {
		t.Errorf("with a CRLF line end: %q does not verify", out)
	}
	_, warn, err := runWithInput(t, strings.Repeat("x", 72)+"\n", "hash-password", "--cost", "4")
	if err != nil || !strings.Contains(warn, "at most 8") {
		t.Errorf("72 bytes: %v, warning %q; want a hash and the SMPP length warning", err, warn)
	}
	for _, in := range []string{"", "\n", strings.Repeat("x", 73) + "\n"} {
		if out, _, err := runWithInput(t, in, "hash-password", "--cost", "4"); err == nil || out != "" {
			t.Errorf("password of %d bytes: %q, %v; want refused, nothing printed", len(in), out, err)
		}
	}
	if _, _, err := runWithInput(t, "x\n", "hash-password", "--cost", "99"); err == nil {
		t.Error("cost 99 accepted")
	}
}

// completion prints a script for each shell that names the program and
// the commands; the binary answers the completion request it sends; man
// prints a roff page listing the commands.
func TestCompletionScriptsAndManPage(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o bashdefault -o default -o nospace -F _cli_bash_autocomplete $PROG",
		"zsh":  "#compdef smppproxy",
		"fish": "complete -c smppproxy",
	} {
		out := mustCLI(t, "completion", shell)
		if !strings.Contains(out, want) || !strings.Contains(out, "smppproxy") {
			t.Errorf("completion %s lacks %q:\n%s", shell, want, out)
		}
	}
	if !strings.Contains(mustCLI(t, "completion", "bash"), "PROG=smppproxy") {
		t.Error("the bash script does not name smppproxy")
	}
	if _, err := runCLI(t, "completion", "tcsh"); err == nil {
		t.Error("completion tcsh: no error")
	}
	// urfave/cli reads os.Args for completion: ask a child, as the
	// script does.
	b, err := newChild("-test.run=^$", "--", "upstreams", "--generate-bash-completion").Output()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(string(b))
	for _, w := range []string{"list", "drain", "resume"} {
		if !strings.Contains(" "+strings.Join(words, " ")+" ", " "+w+" ") {
			t.Errorf("completion of `smppproxy upstreams` = %v, lacks %s", words, w)
		}
	}
	man := mustCLI(t, "man")
	for _, want := range []string{".TH smppproxy", "hash-password", "reload", "upstreams"} {
		if !strings.Contains(man, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
}
