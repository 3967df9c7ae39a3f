package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/state"
)

// getAs GETs path from srv with the request's Host header set to host
// (and the bearer token, when set) and returns the status.
func getAs(t *testing.T, srv *httptest.Server, host, path, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Without a token the admin API answers whoever reaches it, which on the
// default loopback listener is meant to be the machine's own users. A web
// page whose host name an attacker points at 127.0.0.1 once it is loaded
// (DNS rebinding) is same-origin with the listener in the operator's
// browser and could read sessions, keys and metrics (from review): such a
// request names the attacker's host, so without a token only requests
// addressed to an IP address or localhost are answered (the health probes
// always are); with a token, the token decides.
func TestWithoutATokenRequestsAddressedToAnotherHostNameAreRefused(t *testing.T) {
	srv := httptest.NewServer(admin.NewHandler(admin.Config{Store: state.NewMem(nil), Sessions: fakeSessions{}, Pprof: true}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, p := range []string{"/api/v1/sessions", "/api/v1/keys?account=shop", "/metrics", "/", "/debug/pprof/cmdline"} {
		if code := getAs(t, srv, "rebind.evil.example"+port, p, ""); code != http.StatusMisdirectedRequest {
			t.Errorf("GET %s addressed to rebind.evil.example: %d, want 421", p, code)
		}
		for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "[::1]" + port} {
			if code := getAs(t, srv, host, p, ""); code != http.StatusOK {
				t.Errorf("GET %s addressed to %s: %d, want 200", p, host, code)
			}
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code := getAs(t, srv, "probe.example"+port, p, ""); code != http.StatusOK {
			t.Errorf("GET %s addressed to probe.example: %d, want 200 (health probes answer whatever the host)", p, code)
		}
	}
	tok := httptest.NewServer(admin.NewHandler(admin.Config{Store: state.NewMem(nil), Sessions: fakeSessions{}, Token: "tok"}))
	t.Cleanup(tok.Close)
	if code := getAs(t, tok, "admin.example.net"+port, "/api/v1/sessions", "tok"); code != http.StatusOK {
		t.Errorf("with a token, GET addressed to admin.example.net: %d, want 200", code)
	}
}
