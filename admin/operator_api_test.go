package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/proxytest"
)

// Drain and resume an upstream, disable and enable an account, over the
// real proxy: the listings show the switch, a repeated switch says it
// changed nothing, a disable closes the account's session, and an unknown
// name is 404.
func TestOperatorSwitchesShowInListingsAndUnknownNamesAre404(t *testing.T) {
	s := startStackWith(t, func(c *admin.Config) {})
	ctx := t.Context()
	// The stack's own handler has no Operator.
	if _, err := (&admin.Client{BaseURL: s.admin.URL}).Upstreams(ctx); status(err) != http.StatusNotImplemented {
		t.Fatalf("upstreams without an operator: %v, want 501", err)
	}
	op := operatorClient(t, s)
	ups, err := op.Upstreams(ctx)
	if err != nil || len(ups) != 1 || ups[0].Name != proxytest.Upstream || ups[0].Drained {
		t.Fatalf("upstreams = %+v, %v; want one, not drained", ups, err)
	}
	sw, err := op.Switch(ctx, "drain", proxytest.Upstream)
	if err != nil || !sw.Changed {
		t.Fatalf("drain = %+v, %v; want changed", sw, err)
	}
	if sw, err := op.Switch(ctx, "drain", proxytest.Upstream); err != nil || sw.Changed {
		t.Fatalf("second drain = %+v, %v; want unchanged", sw, err)
	}
	if ups, _ := op.Upstreams(ctx); !ups[0].Drained {
		t.Fatalf("after drain: %+v, want drained", ups[0])
	}
	if _, err := op.Switch(ctx, "resume", proxytest.Upstream); err != nil {
		t.Fatal(err)
	}
	if ups, _ := op.Upstreams(ctx); ups[0].Drained {
		t.Fatalf("after resume: %+v, want not drained", ups[0])
	}
	for _, a := range []string{"drain", "resume", "disable", "enable"} {
		if _, err := op.Switch(ctx, a, "nobody"); !errors.Is(err, admin.ErrNotFound) {
			t.Errorf("%s nobody: %v, want 404", a, err)
		}
	}

	sw, err = op.Switch(ctx, "disable", proxytest.SystemID)
	if err != nil || !sw.Changed || sw.Closed != 1 {
		t.Fatalf("disable = %+v, %v; want changed, 1 session closed", sw, err)
	}
	select {
	case <-s.esme.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the disabled account's session is still open")
	}
	accts, err := op.Accounts(ctx)
	if err != nil || len(accts) != 1 || !accts[0].Disabled {
		t.Fatalf("accounts = %+v, %v; want shop disabled", accts, err)
	}
	if sw, err := op.Switch(ctx, "enable", proxytest.SystemID); err != nil || !sw.Changed {
		t.Fatalf("enable = %+v, %v", sw, err)
	}
	if accts, _ := op.Accounts(ctx); accts[0].Disabled {
		t.Fatalf("after enable: %+v", accts[0])
	}
}

// operatorClient serves s's app as the Operator on a second admin handler.
func operatorClient(t *testing.T, s *stack) *admin.Client {
	t.Helper()
	return fakeAdmin(t, admin.Config{Operator: s.app})
}

// A switch and a reload are mutations: without a JSON content type they
// are refused (415) and nothing changes.
func TestOperatorSwitchesAndReloadNeedJSON(t *testing.T) {
	s := startStackWith(t, func(c *admin.Config) {})
	reloads := 0
	cl := fakeAdmin(t, admin.Config{Operator: s.app, Reload: func(context.Context) (admin.Reloaded, error) {
		reloads++
		return admin.Reloaded{}, nil
	}})
	for _, path := range []string{"/api/v1/upstreams/drain", "/api/v1/accounts/disable", "/api/v1/reload"} {
		body := `{"name":"` + proxytest.Upstream + `"}`
		if strings.Contains(path, "accounts") {
			body = `{"name":"shop"}`
		}
		resp, err := http.Post(cl.BaseURL+path, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s as text/plain = %d, want 415", path, resp.StatusCode)
		}
	}
	if ups := s.app.Upstreams(); ups[0].Drained {
		t.Error("a refused drain drained the upstream")
	}
	if reloads != 0 {
		t.Errorf("a refused reload ran %d time(s)", reloads)
	}
	select {
	case <-s.esme.Done():
		t.Fatal("a refused disable closed the session")
	default:
	}
}

// A reload answers the applied and restart lines; a configuration that
// does not validate is 422 with each problem, file:line first.
func TestReloadAnswersItsLinesAndRefusesABadFileWith422(t *testing.T) {
	var fail error
	cl := fakeAdmin(t, admin.Config{Reload: func(context.Context) (admin.Reloaded, error) {
		if fail != nil {
			return admin.Reloaded{}, fail
		}
		return admin.Reloaded{Applied: []string{"account shop: throughput 10 → 20"}, Restart: []string{"listen.address"}}, nil
	}})
	got, err := cl.Reload(t.Context())
	if err != nil || len(got.Applied) != 1 || got.Applied[0] != "account shop: throughput 10 → 20" || len(got.Restart) != 1 {
		t.Fatalf("reload = %+v, %v", got, err)
	}
	_, fail = config.Parse([]byte("listen:\n  address: 1\naccounts: nope\n"), "proxy.yaml")
	if fail == nil {
		t.Fatal("the bad configuration parsed")
	}
	resp, err := http.Post(cl.BaseURL+"/api/v1/reload", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"problems"`) || !strings.Contains(string(body), "proxy.yaml:") {
		t.Fatalf("reload of a bad file = %d %s, want 422 with the problems and their file:line", resp.StatusCode, body)
	}
	if _, err := cl.Reload(t.Context()); status(err) != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), "proxy.yaml:") {
		t.Fatalf("client reload of a bad file: %v", err)
	}
}
