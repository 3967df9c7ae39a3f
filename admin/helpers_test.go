package admin_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/state"
)

// stack is a proxy on a real Badger store with one upstream (a simulator
// that never answers keys starting with "lost") and its admin endpoint,
// all on 127.0.0.1, with an ESME bound as shop.
type stack struct {
	app   *proxy.App
	admin *httptest.Server
	esme  *esme.Client
}

func startStack(t *testing.T, token string) *stack {
	t.Helper()
	return startStackWith(t, func(c *admin.Config) { c.Token = token })
}

// startStackWith is startStack with the admin configuration adjusted by
// mut and the proxy's setup by opts.
func startStackWith(t *testing.T, mut func(*admin.Config), opts ...proxytest.Option) *stack {
	t.Helper()
	reg := prometheus.NewRegistry()
	lost := proxytest.WithSim(sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Drop: strings.HasPrefix(c.Key, "lost")}
	}})
	fast := proxytest.WithConfig(func(cfg *config.Config) {
		up := &cfg.Upstreams[0]
		up.Binds = 1 // the stats test counts the binds
		up.ResponseTimeout = config.Duration(200 * time.Millisecond)
		up.ForwardKeyTLV = true // the simulator decides by key
	})
	app := proxytest.Start(t, func(cfg *config.Config) (*proxy.App, error) {
		return proxy.New(proxy.Options{Config: cfg, Registerer: reg})
	}, append([]proxytest.Option{lost, fast}, opts...)...).Proxy
	acfg := admin.Config{
		Sessions: &app.Sessions, Store: app.Store(), Resolver: app.Engine(), Receipts: app.Receipts(), Gatherer: reg, Ready: app.Ready,
	}
	mut(&acfg)
	srv := httptest.NewServer(admin.NewHandler(acfg))
	t.Cleanup(srv.Close)
	c, err := esme.Dial(t.Context(), app.Addr(), esme.Options{SystemID: proxytest.SystemID, Password: proxytest.Password, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &stack{app: app, admin: srv, esme: c}
}

func (s *stack) submit(t *testing.T, key string) esme.Resp {
	t.Helper()
	r, err := s.esme.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: key, Text: []byte("hello")})
	if err != nil {
		t.Fatalf("submit %s: %v", key, err)
	}
	return r
}

// wantUnchanged checks that the requests of what changed nothing: the
// ESME's session lives and the record of lost-1 is still unknown.
func (s *stack) wantUnchanged(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.esme.Done():
		t.Fatalf("the session was closed after %s: %v", what, s.esme.Err())
	default:
	}
	if rec, err := s.app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:lost-1"}); err != nil || rec.State != state.Unknown {
		t.Fatalf("record after %s: %v, %v; want unknown", what, rec, err)
	}
}

// status is the HTTP status of an *admin.APIError, 0 for any other error.
func status(err error) int {
	var ae *admin.APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// fakeReceipts serves Unmatched from a fixed list, remembering what it
// was asked.
type fakeReceipts struct {
	kept      []dlr.UnmatchedReceipt
	err       error
	upstreams []string
	limits    []int
}

func (f *fakeReceipts) Unmatched(_ context.Context, upstream string, limit int) ([]dlr.UnmatchedReceipt, error) {
	f.upstreams, f.limits = append(f.upstreams, upstream), append(f.limits, limit)
	if f.err != nil {
		return nil, f.err
	}
	var out []dlr.UnmatchedReceipt
	for _, r := range f.kept {
		if (upstream == "" || r.Upstream == upstream) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// fakeSessions lists fixed sessions.
type fakeSessions []session.Info

func (f fakeSessions) List() []session.Info { return append([]session.Info(nil), f...) }

func (f fakeSessions) Kick(string) error { return session.ErrNotFound }

func fakeAdmin(t *testing.T, cfg admin.Config) *admin.Client {
	t.Helper()
	if cfg.Sessions == nil {
		cfg.Sessions = fakeSessions{}
	}
	if cfg.Store == nil {
		cfg.Store = state.NewMem(nil)
	}
	srv := httptest.NewServer(admin.NewHandler(cfg))
	t.Cleanup(srv.Close)
	return &admin.Client{BaseURL: srv.URL, Token: cfg.Token}
}
