package admin_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// With a token set, /readyz answers a probe without it 503 and nothing
// more (the reason names accounts, or the database); with the token, the
// reason. And requests with a wrong token log one line per source and
// minute, not one each.
func TestReadyzGivesItsReasonOnlyWithTheTokenAndRefusalsLogOnce(t *testing.T) {
	const token = "s3cr3t-admin-token"
	lines := testkit.NewLogLines()
	notReady := fmt.Errorf("not ready: no upstream bind up for the route of account secret-shop: %w", errors.New("x"))
	srv := httptest.NewServer(admin.NewHandler(admin.Config{Store: state.NewMem(nil), Token: token,
		Ready: func() error { return notReady }, Logger: slog.New(lines)}))
	defer srv.Close()
	resp, body := testkit.Get(t, srv.URL+"/readyz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "secret-shop") {
		t.Errorf("GET /readyz without the token = %d %q, want 503 without the reason", resp.StatusCode, body)
	}
	resp, body = testkit.Get(t, srv.URL+"/readyz", token)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "secret-shop") {
		t.Errorf("GET /readyz with the token = %d %q, want 503 with the reason", resp.StatusCode, body)
	}
	for range 50 {
		testkit.Get(t, srv.URL+"/api/v1/stats", "wrong")
	}
	if n, _ := lines.Count("admin request refused: missing or wrong bearer token"); n != 1 {
		t.Errorf("50 requests with a wrong token logged %d lines, want 1", n)
	}
}
