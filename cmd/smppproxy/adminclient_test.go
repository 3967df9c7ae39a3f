package main

import (
	"net/http"
	"net/http/httptest"
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
