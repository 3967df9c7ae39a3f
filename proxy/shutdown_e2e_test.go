package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
)

// A shutdown whose deadline passes while a submit waits for an upstream
// answer does not wait response_timeout more: the submit is persisted
// unknown and the store is closed cleanly.
func TestShutdownDeadlineDoesNotWaitForResponseTimeout(t *testing.T) {
	smsc := startSim(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Drop: true} }})
	dir := t.TempDir()
	cfg := testConfig(t, smsc.Addr(), dir)
	cfg.Upstreams[0].ResponseTimeout = config.Duration(30 * time.Second)
	app, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	if err := app.WaitUpstreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	go func() { _, _ = c.call(smpptest.EncodeSubmit(1, keyed("sd-1", "x")), 40*time.Second) }()
	waitFor(t, 10*time.Second, "the submit to reach the SMSC", func() bool { return smsc.Total() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = app.Shutdown(ctx)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Shutdown took %v, want about the 300ms deadline, not response_timeout (30s)", el)
	}
	st, err := state.OpenBadger(state.BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Get(context.Background(), state.Key{Account: "shop", Key: "k:sd-1"})
	if err != nil || rec.State != state.Unknown {
		t.Errorf("record after shutdown = %+v, %v; want unknown", rec, err)
	}
}
