package admin_test

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/state"
)

// get sends a GET with the bearer token ("" = none) and returns the
// status, the headers and the body.
func getStatus(t *testing.T, url, token string) (int, http.Header, string) {
	t.Helper()
	resp, body := testkit.Get(t, url, token)
	return resp.StatusCode, resp.Header, body
}

func decodeStatus(t *testing.T, body string) admin.Status {
	t.Helper()
	var s admin.Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, body)
	}
	return s
}

// The page and its assets come with a Content-Security-Policy that allows
// the page's own script and style sheet only (no inline code, no other
// origin), and nothing the page loads names another origin.
func TestStatusPageHasAStrictCSPAndLoadsNothingFromElsewhere(t *testing.T) {
	s := startStack(t, "")
	for _, path := range []string{"/", "/static/status.js", "/static/status.css", "/static/favicon.svg"} {
		code, hdr, body := getStatus(t, s.admin.URL+path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, code)
		}
		csp := hdr.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "form-action 'none'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: CSP %q allows unsafe code", path, csp)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", path)
		}
		// The SVG's XML namespace is a name, not a load.
		body = strings.ReplaceAll(body, `xmlns="http://www.w3.org/2000/svg"`, "")
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).FindString(body); m != "" {
			t.Errorf("GET %s names another origin: %q", path, m)
		}
	}
	_, _, page := getStatus(t, s.admin.URL+"/", "")
	if !strings.Contains(page, `name="viewport"`) {
		t.Error("the page has no viewport meta (unreadable on a phone)")
	}
	if m := regexp.MustCompile(`<script>|<style|\sstyle=|\son[a-z]+=`).FindString(page); m != "" {
		t.Errorf("the page has inline code or style (%q), which its CSP refuses", m)
	}
}

// Without a token the page is rendered with its data; with one, / is a
// shell with no data at all (the token form), and /api/v1/status, like
// every /api/v1/ read, answers only with the bearer token.
func TestStatusPageWithATokenShowsNoDataBeforeIt(t *testing.T) {
	for _, token := range []string{"", "t0ken"} {
		s := startStack(t, token)
		id := s.app.Sessions.List()[0].ID
		_, _, page := getStatus(t, s.admin.URL+"/", "")
		if token == "" {
			if !strings.Contains(page, id) || !strings.Contains(page, proxytest.Upstream) {
				t.Errorf("page without a token lacks session %s or upstream %s", id, proxytest.Upstream)
			}
			continue
		}
		for _, secret := range []string{id, proxytest.SystemID + "<", proxytest.Upstream, "127.0.0.1:"} {
			if strings.Contains(page, secret) {
				t.Errorf("the shell served before the token holds %q", secret)
			}
		}
		if !strings.Contains(page, `id="token-form"`) || !strings.Contains(page, `data-token-required="true"`) {
			t.Errorf("the shell has no token form")
		}
		for _, path := range []string{"/api/v1/status", "/api/v1/status?format=html"} {
			if code, _, body := getStatus(t, s.admin.URL+path, ""); code != http.StatusUnauthorized {
				t.Errorf("GET %s without the token: HTTP %d %s, want 401", path, code, body)
			}
			if code, _, _ := getStatus(t, s.admin.URL+path, "wrong"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token: HTTP %d, want 401", path, code)
			}
		}
		code, _, body := getStatus(t, s.admin.URL+"/api/v1/status", token)
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/status with the token: HTTP %d %s", code, body)
		}
		st := decodeStatus(t, body)
		if !st.TokenRequired || len(st.Accounts) != 1 || st.Accounts[0].Name != proxytest.SystemID || len(st.Accounts[0].Sessions) != 1 || st.Accounts[0].Sessions[0].ID != id {
			t.Errorf("status accounts %+v, want %s with session %s", st.Accounts, proxytest.SystemID, id)
		}
		if len(st.Upstreams) != 1 || st.Upstreams[0].Name != proxytest.Upstream || st.Upstreams[0].State != "bound" || st.Upstreams[0].Bound != 1 {
			t.Errorf("status upstreams %+v, want %s bound", st.Upstreams, proxytest.Upstream)
		}
		if _, _, frag := getStatus(t, s.admin.URL+"/api/v1/status?format=html", token); !strings.Contains(frag, id) || strings.Contains(frag, "<html") {
			t.Errorf("the sections with the token lack session %s or are a whole page", id)
		}
	}
}

// An unknown record is listed for the operator by key and fingerprint
// tag; neither the page nor its JSON holds the message text, the
// account's password or the raw fingerprint.
func TestStatusListsUnknownRecordsWithoutTextPasswordOrFingerprint(t *testing.T) {
	s := startStack(t, "")
	s.submit(t, "lost-1")
	rec, err := s.app.Store().Get(t.Context(), state.Key{Account: proxytest.SystemID, Key: "k:lost-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, body := getStatus(t, s.admin.URL+"/api/v1/status", "")
	st := decodeStatus(t, body)
	if len(st.Unknown) != 1 || st.Unknown[0].Key != "lost-1" || st.Unknown[0].State != "unknown" || len(st.Unknown[0].FingerprintTag) != 8 {
		t.Fatalf("unknown records %+v, want lost-1 with its tag", st.Unknown)
	}
	_, _, page := getStatus(t, s.admin.URL+"/", "")
	if !strings.Contains(page, `data-key="lost-1"`) {
		t.Errorf("the page has no resolve form for lost-1")
	}
	fp := hex.EncodeToString(rec.Fingerprint[:])
	for what, doc := range map[string]string{"JSON": body, "page": page} {
		for _, secret := range []string{"hello", proxytest.Password, fp, fp[:16]} {
			if strings.Contains(doc, secret) {
				t.Errorf("the status %s holds %q", what, secret)
			}
		}
	}
}

// The proxy is what the command gives the status page as its source.
var _ admin.StatusSource = (*proxy.App)(nil)

// fakeStatus is a StatusSource with fixed upstreams and accounts.
type fakeStatus struct {
	upstreams []session.Upstream
	accounts  []session.Account
}

func (f fakeStatus) Upstreams() []session.Upstream { return f.upstreams }
func (f fakeStatus) Accounts() []session.Account   { return f.accounts }

// With Config.Status the page lists every configured upstream and account
// with its switches, bound or not; without it, those seen, and says so.
// Serving the page leaves no goroutine behind.
func TestStatusShowsConfiguredUpstreamsAndAccountsWithTheirSwitches(t *testing.T) {
	testkit.CheckLeaks(t, 5*time.Second)
	src := fakeStatus{
		upstreams: []session.Upstream{
			{Name: "a", Binds: 2, Up: 2, Drained: true, Healthy: true},
			{Name: "b", Binds: 1, Healthy: true},
			{Name: "c", Binds: 1, Healthy: false},
		},
		accounts: []session.Account{
			{Name: "shop", MaxBinds: 2, Throughput: 50, Route: []string{"a"}},
			{Name: "bank", Disabled: true},
		},
	}
	sessions := fakeSessions{
		{ID: "esme-1", Side: session.SideESME, Owner: "shop", Bind: session.BindTRX, State: "bound"},
		{ID: "up-1", Side: session.SideUpstream, Owner: "a", Bind: "transceiver", State: "bound", InFlight: 3, Window: 10},
	}
	for _, cfg := range []admin.Config{{Sessions: sessions, Status: src}, {Sessions: sessions}} {
		cfg.Store = state.NewMem(nil)
		srv := httptest.NewServer(admin.NewHandler(cfg))
		_, _, body := getStatus(t, srv.URL+"/api/v1/status", "")
		_, _, page := getStatus(t, srv.URL+"/", "")
		srv.Close()
		st := decodeStatus(t, body)
		if cfg.Status == nil {
			if st.AccountsKnown || st.UpstreamsKnown || !strings.Contains(page, "configuration not available") {
				t.Errorf("without Config.Status: known %v/%v; want both false and the page saying so", st.AccountsKnown, st.UpstreamsKnown)
			}
			if len(st.Accounts) != 1 || len(st.Upstreams) != 1 || st.Upstreams[0].InFlight != 3 || st.Upstreams[0].Window != 10 {
				t.Errorf("without Config.Status: accounts %+v, upstreams %+v; want those of the sessions", st.Accounts, st.Upstreams)
			}
			continue
		}
		states := map[string]string{}
		for _, u := range st.Upstreams {
			states[u.Name] = u.State
		}
		if want := map[string]string{"a": "drained", "b": "down", "c": "unhealthy"}; len(states) != 3 || states["a"] != want["a"] || states["b"] != want["b"] || states["c"] != want["c"] {
			t.Errorf("upstream states %v, want %v", states, want)
		}
		if len(st.Accounts) != 2 || st.Accounts[0].Name != "shop" || len(st.Accounts[0].Sessions) != 1 || st.Accounts[0].Throughput != 50 || !st.Accounts[1].Disabled || len(st.Accounts[1].Sessions) != 0 {
			t.Errorf("accounts %+v, want shop with its session and bank disabled", st.Accounts)
		}
		if !strings.Contains(page, "disabled") || !strings.Contains(page, "drained") {
			t.Errorf("the page does not show the disabled account and the drained upstream")
		}
	}
}

// Every embedded asset is served (the page refers to nothing missing).
func TestStatusPageAssetsAreEmbedded(t *testing.T) {
	srv := httptest.NewServer(admin.NewHandler(admin.Config{Sessions: fakeSessions{}, Store: state.NewMem(nil)}))
	defer srv.Close()
	_, _, page := getStatus(t, srv.URL+"/", "")
	refs := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("the page refers to %d assets, want the script, the style sheet and the icon", len(refs))
	}
	if code, _, _ := getStatus(t, srv.URL+"/static/", ""); code != http.StatusNotFound {
		t.Errorf("GET /static/: HTTP %d, want 404 (no listing)", code)
	}
	for _, m := range refs {
		if code, _, _ := getStatus(t, srv.URL+m[1], ""); code != http.StatusOK {
			t.Errorf("GET %s: HTTP %d", m[1], code)
		}
	}
}
