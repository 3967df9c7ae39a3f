package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A command given the wrong number of arguments names itself with its
// parent command in the usage line.
func TestAdminCommandUsageNamesTheParentCommand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"keys", "show", "shop"}, "usage: smppproxy keys show ACCOUNT KEY"},
		{[]string{"keys", "resolve", "shop"}, "usage: smppproxy keys resolve ACCOUNT KEY --message-id ID | --not-sent"},
		{[]string{"sessions", "kick"}, "usage: smppproxy sessions kick ID"},
		{[]string{"sessions", "list", "extra"}, `sessions list takes no arguments (got ["extra"])`},
		{[]string{"receipts", "unmatched", "extra"}, `receipts unmatched takes no arguments (got ["extra"])`},
		{[]string{"stats", "extra"}, `stats takes no arguments (got ["extra"])`},
	}
	for _, tt := range tests {
		_, err := runCLI(t, tt.args...)
		if err == nil || err.Error() != tt.want {
			t.Errorf("smppproxy %s: error %v, want %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
}

// --admin accepts a bare HOST:PORT as well as a URL.
func TestAdminFlagAcceptsHostPort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/sessions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sessions":[{"id":"esme-7","side":"esme","owner":"shop","bind":"TRX","state":"bound"}]}`))
	}))
	t.Cleanup(srv.Close)
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	for _, admin := range []string{hostPort, srv.URL} {
		out, err := runCLI(t, "sessions", "list", "--admin", admin)
		if err != nil {
			t.Fatalf("sessions list --admin %s: %v", admin, err)
		}
		if !strings.Contains(out, "esme-7") {
			t.Errorf("sessions list --admin %s printed %q, want the session esme-7", admin, out)
		}
	}
}

// The admin address and token file come from the flags, else --config,
// else the environment, else the default; each from the first source that
// gives it. A listen address on every interface is dialled on loopback.
func TestAdminTargetPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, "127.0.0.1:2775", "127.0.0.1:2776")
	b, _ := os.ReadFile(cfgPath)
	cfgText := regexp.MustCompile(`(?m)^admin:\n  address: "[^"]*"`).ReplaceAllString(string(b), "admin:\n  address: \"0.0.0.0:9911\"\n  token_file: \"/etc/t\"")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	noTokenCfg := filepath.Join(dir, "no-token.yaml")
	if err := os.WriteFile(noTokenCfg, []byte(strings.Replace(cfgText, "\n  token_file: \"/etc/t\"", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envAdmin: "10.0.0.1:9775", envTokenFile: "/env/token"}
	getenv := func(k string) string { return env[k] }
	noEnv := func(string) string { return "" }
	tests := []struct {
		name                string
		flagAddr, flagToken string
		cfg                 string
		getenv              func(string) string
		wantAddr, wantToken string
	}{
		{"flags win", "h:1", "/flag/token", cfgPath, getenv, "h:1", "/flag/token"},
		{"config before env", "", "", cfgPath, getenv, "127.0.0.1:9911", "/etc/t"},
		{"flag address, config token", "h:1", "", cfgPath, getenv, "h:1", "/etc/t"},
		{"env", "", "", "", getenv, "10.0.0.1:9775", "/env/token"},
		{"config address, env token", "", "", noTokenCfg, getenv, "127.0.0.1:9911", "/env/token"},
		{"default", "", "", "", noEnv, "http://127.0.0.1:9775", ""},
	}
	for _, tt := range tests {
		addr, token, err := adminTarget(tt.flagAddr, tt.flagToken, tt.cfg, tt.getenv)
		if err != nil || addr != tt.wantAddr || token != tt.wantToken {
			t.Errorf("%s: %q, %q, %v; want %q, %q", tt.name, addr, token, err, tt.wantAddr, tt.wantToken)
		}
	}
	if _, _, err := adminTarget("", "", filepath.Join(dir, "missing.yaml"), noEnv); err == nil {
		t.Error("a missing --config file: no error")
	}
}
