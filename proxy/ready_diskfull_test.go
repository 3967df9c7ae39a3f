package proxy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// A store that refuses writes for want of disk space (it still reads)
// makes the proxy not ready: a balancer then stops sending it submits
// that would all get 0x08.
func TestTheProxyIsNotReadyWhileItsStoreRefusesWritesForDiskSpace(t *testing.T) {
	app := proxytest.Start(t, func(cfg *config.Config) (*proxy.App, error) {
		st, err := state.OpenBadger(state.BadgerOptions{Path: t.TempDir(), MinFreeBytes: 1 << 62})
		if err != nil {
			return nil, err
		}
		return proxy.New(proxy.Options{Config: cfg, Store: st})
	}).Proxy
	c, err := esme.Dial(t.Context(), app.Addr(), esme.Options{SystemID: proxytest.SystemID, Password: proxytest.Password, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "k1", Text: []byte("hello")})
	if err != nil || r.Status != smpp.StatusSysErr {
		t.Fatalf("submit with the disk full = %v, %v; want ESME_RSYSERR", r.Status, err)
	}
	if err := app.Ready(); !errors.Is(err, proxy.ErrNotReady) || !errors.Is(err, state.ErrDiskFull) {
		t.Errorf("Ready() with the disk full = %v, want not ready for the disk", err)
	}
}
