package admin_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// A wrong or missing admin token gets 401 and changes nothing.
func TestWrongOrMissingTokenIs401AndChangesNothing(t *testing.T) {
	const token = "s3cr3t-admin-token"
	s := startStack(t, token)
	if r := s.submit(t, "lost-1"); r.Status != smpp.StatusSysErr {
		t.Fatalf("submit of a dropped key: status %v, want ESME_RSYSERR (unknown)", r.Status)
	}
	id := s.app.Sessions.List()[0].ID // ESME side sorts first

	requests := []struct{ method, path, body string }{
		{"GET", "/metrics", ""},
		{"GET", "/api/v1/sessions", ""},
		{"GET", "/api/v1/stats", ""},
		{"GET", "/api/v1/keys?state=unknown", ""},
		{"GET", "/api/v1/keys/show?account=shop&key=lost-1", ""},
		{"GET", "/api/v1/receipts/unmatched", ""},
		{"POST", "/api/v1/sessions/kick", `{"id":"` + id + `"}`},
		{"POST", "/api/v1/keys/resolve", `{"account":"shop","key":"lost-1","message_id":"999"}`},
		{"GET", "/api/v1/nothing-here", ""},
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", token, "Basic " + token, "Bearer"} {
		for _, rq := range requests {
			req, _ := http.NewRequest(rq.method, s.admin.URL+rq.path, strings.NewReader(rq.body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, body := testkit.Do(t, req)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with Authorization %q = %d %s, want 401 with WWW-Authenticate", rq.method, rq.path, auth, resp.StatusCode, body)
			}
			if strings.Contains(string(body), "smppproxy_") || strings.Contains(string(body), "lost-1") {
				t.Errorf("%s %s with Authorization %q leaked data: %s", rq.method, rq.path, auth, body)
			}
		}
	}
	s.wantUnchanged(t, "unauthenticated kick and resolve")
	// The probes need no token; the right token opens everything.
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, _ := testkit.Get(t, s.admin.URL+p, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without token = %d, want 200", p, resp.StatusCode)
		}
	}
	cl := &admin.Client{BaseURL: s.admin.URL, Token: token}
	if _, err := cl.Sessions(t.Context()); err != nil {
		t.Fatalf("Sessions with the right token: %v", err)
	}
	bad := &admin.Client{BaseURL: s.admin.URL, Token: "nope"}
	if _, err := bad.Sessions(t.Context()); !errors.Is(err, admin.ErrUnauthorized) {
		t.Fatalf("Sessions with a wrong token: %v, want ErrUnauthorized", err)
	}
}

func TestAPIErrors(t *testing.T) {
	s := startStack(t, "")
	cl := &admin.Client{BaseURL: s.admin.URL}
	s.submit(t, "ok-1")
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"kick unknown id", cl.Kick(ctx, "esme-999"), 404},
		{"kick upstream bind", cl.Kick(ctx, s.app.Sessions.List()[1].ID), 404},
		{"show unknown key", second(cl.Key(ctx, "shop", "nope", nil)), 404},
		{"list bad state", second(cl.Keys(ctx, "", "lost", 0)), 400},
		{"resolve accepted record", second(cl.Resolve(ctx, admin.ResolveRequest{Account: "shop", Key: "ok-1", MessageID: "1"})), 409},
		{"resolve unknown key", second(cl.Resolve(ctx, admin.ResolveRequest{Account: "shop", Key: "nope", NotSent: true})), 404},
		{"resolve both", second(cl.Resolve(ctx, admin.ResolveRequest{Account: "shop", Key: "ok-1", MessageID: "1", NotSent: true})), 400},
		{"resolve neither", second(cl.Resolve(ctx, admin.ResolveRequest{Account: "shop", Key: "ok-1"})), 400},
	} {
		if got := status(tc.err); got != tc.want {
			t.Errorf("%s: %v (HTTP %d), want HTTP %d", tc.name, tc.err, got, tc.want)
		}
	}
	if rec, _ := s.app.Store().Get(ctx, state.Key{Account: "shop", Key: "k:ok-1"}); rec == nil || rec.State != state.Accepted || len(rec.History) != 2 {
		t.Fatalf("refused calls changed the record: %+v", rec)
	}
}

func second[T any](_ T, err error) error { return err }

func TestKeysListShowResolveAndStats(t *testing.T) {
	s := startStack(t, "")
	cl := &admin.Client{BaseURL: s.admin.URL}
	ctx := t.Context()
	first := s.submit(t, "otp-1")
	s.submit(t, "otp-1") // replayed
	s.submit(t, "lost-1")

	l, err := cl.Keys(ctx, "shop", "unknown", 0)
	if err != nil || len(l.Records) != 1 || l.Records[0].Key != "lost-1" || l.Records[0].Kind != "tlv" {
		t.Fatalf("Keys(shop, unknown) = %+v, %v; want just lost-1", l, err)
	}
	if l, err := cl.Keys(ctx, "", "", 1); err != nil || len(l.Records) != 1 || !l.Truncated {
		t.Fatalf("Keys(limit 1) = %+v, %v; want 1 record, truncated", l, err)
	}
	got, err := cl.Key(ctx, "shop", "otp-1", nil)
	if err != nil || len(got.Records) != 1 {
		t.Fatalf("Key(otp-1) = %+v, %v", got, err)
	}
	r := got.Records[0]
	if r.State != "accepted" || r.MessageID != first.MessageID || r.Upstream != "smsc" || len(r.History) != 2 {
		t.Fatalf("Key(otp-1) = %+v, want accepted %s via smsc with 2 events (created and journaled, accepted)", r, first.MessageID)
	}
	// The stored form of the key finds it too.
	if got, err := cl.Key(ctx, "shop", "k:otp-1", nil); err != nil || got.Records[0].Key != "otp-1" {
		t.Fatalf("Key(k:otp-1) = %+v, %v", got, err)
	}

	res, err := cl.Resolve(ctx, admin.ResolveRequest{Account: "shop", Key: "lost-1", MessageID: "777", By: "tester"})
	if err != nil || res.State != "accepted" || res.MessageID != "777" {
		t.Fatalf("Resolve(lost-1) = %+v, %v", res, err)
	}
	if last := res.History[len(res.History)-1]; !strings.Contains(last.Note, "tester") || last.MessageID != "777" {
		t.Errorf("resolution event %+v does not name the operator and the id", last)
	}
	if r := s.submit(t, "lost-1"); r.Status != 0 || r.MessageID != "777" {
		t.Fatalf("retry after resolve: status %v id %q, want 0 and 777", r.Status, r.MessageID)
	}

	st, err := cl.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"forwarded": 1, "replayed": 2, "unknown": 1}
	for o, n := range want {
		if st.Submits[o] != n {
			t.Errorf("stats submits[%s] = %v, want %v (all: %v)", o, st.Submits[o], n, st.Submits)
		}
	}
	if st.ESMESessions["shop"] != 1 || st.Upstreams["smsc"] == nil || st.Upstreams["smsc"].Bound != 1 || st.Resolved["accepted"] != 1 {
		t.Errorf("stats = %+v", st)
	}
}
