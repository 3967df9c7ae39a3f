package proxy

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

// startShared starts instance id of a proxy on the shared PostgreSQL store
// at dsn (schema) in front of the SMSC at smsc; edit, when set, changes its
// configuration first.
func startShared(t *testing.T, smsc, dsn, schema, id string, edit func(*config.Config)) *App {
	t.Helper()
	cfg := testConfig(t, smsc, t.TempDir())
	cfg.Store.Backend, cfg.Store.DSN, cfg.Store.Schema, cfg.Store.InstanceID = config.BackendPostgres, dsn, schema, id
	if edit != nil {
		edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startProxy(t, cfg)
}

// dialClient binds an esme client of account shop to addr as bind (closed
// when the test ends).
func dialClient(t *testing.T, addr string, bind smpp.BindType) *esme.Client {
	t.Helper()
	c, err := esme.Dial(t.Context(), addr, esme.Options{SystemID: "shop", Password: "secret", Bind: bind, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
