package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// pprofServer serves the admin handler with the profiler on or off and
// the given token, on 127.0.0.1 (httptest). The profiler needs none of
// the API's dependencies: a memory store and no sessions.
func pprofServer(t *testing.T, on bool, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(admin.NewHandler(admin.Config{Store: state.NewMem(nil), Pprof: on, Token: token}))
	t.Cleanup(srv.Close)
	return srv
}

// getPprof GETs path with the bearer token (none when empty) and returns
// the status and body.
func getPprof(t *testing.T, srv *httptest.Server, path, token string) (int, string) {
	t.Helper()
	resp, body := testkit.Get(t, srv.URL+path, token)
	return resp.StatusCode, body
}

var pprofPaths = []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"}

// The profiler is off by default: nothing answers under /debug/pprof/,
// with or without a token.
func TestPprofOffByDefaultIs404(t *testing.T) {
	for _, token := range []string{"", "tok"} {
		srv := pprofServer(t, false, token)
		for _, p := range pprofPaths {
			if code, body := getPprof(t, srv, p, token); code != http.StatusNotFound {
				t.Errorf("pprof off, token %q: GET %s = %d %.80q, want 404", token, p, code, body)
			}
		}
	}
}

// With a token, the profiler is behind it like /metrics: 401 without or
// with a wrong one (and no profile data), 200 with it.
func TestPprofWithTokenNeedsTheToken(t *testing.T) {
	const token = "pprof-admin-token"
	srv := pprofServer(t, true, token)
	for _, p := range pprofPaths {
		for _, bad := range []string{"", "wrong"} {
			code, body := getPprof(t, srv, p, bad)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q = %d, want 401", p, bad, code)
			}
			if strings.Contains(body, "goroutine") || strings.Contains(body, "heap") {
				t.Errorf("GET %s with token %q leaked profile data: %.120q", p, bad, body)
			}
		}
		if code, body := getPprof(t, srv, p, token); code != http.StatusOK {
			t.Errorf("GET %s with the token = %d %.120q, want 200", p, code, body)
		}
	}
	if _, body := getPprof(t, srv, "/debug/pprof/goroutine?debug=1", token); !strings.Contains(body, "goroutine") {
		t.Errorf("goroutine profile with the token does not list goroutines: %.200q", body)
	}
}

// Without a token (allowed by the configuration only on loopback), the
// profiler answers anyone who reaches the listener.
func TestPprofOnLoopbackWithoutTokenAnswers(t *testing.T) {
	srv := pprofServer(t, true, "")
	for _, p := range pprofPaths {
		if code, body := getPprof(t, srv, p, ""); code != http.StatusOK {
			t.Errorf("GET %s = %d %.120q, want 200", p, code, body)
		}
	}
}
