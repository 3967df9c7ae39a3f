package proxy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
)

// reloaded returns a copy of cfg with its own account and upstream
// slices, changed by edit, validated.
func reloaded(t *testing.T, cfg *config.Config, edit func(*config.Config)) *config.Config {
	t.Helper()
	c := *cfg
	c.Accounts = slices.Clone(cfg.Accounts)
	c.Upstreams = slices.Clone(cfg.Upstreams)
	edit(&c)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

func hasLine(lines []string, prefix string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func TestReloadAddsAnAccountAndSaysWhatNeedsARestart(t *testing.T) {
	smsc, cfg := simConfig(t, sim.Config{})
	app := startProxy(t, cfg)
	if st := dialESME(t, app.Addr()).bind(smpp.CmdBindTransceiver, "bank", "bankpw"); st == smpp.StatusOK {
		t.Fatal("bind of an account that is not configured succeeded")
	}
	next := reloaded(t, cfg, func(c *config.Config) {
		bank := config.AccountDefaults()
		bank.SystemID, bank.Password, bank.Route = "bank", "bankpw", []string{"smsc"}
		c.Accounts = append(c.Accounts, bank)
		c.Accounts[0].Throughput = 1000
		c.Listen.Address = "127.0.0.1:1"
	})
	r, err := app.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(r.Applied, "account bank added") || !hasLine(r.Applied, "account shop changed: throughput") {
		t.Errorf("Applied = %q, want bank added and shop's throughput changed", r.Applied)
	}
	if !slices.Contains(r.Restart, "listen") {
		t.Errorf("Restart = %q, want listen (a listener moves only at a restart)", r.Restart)
	}
	bank := dialESME(t, app.Addr())
	if st := bank.bind(smpp.CmdBindTransceiver, "bank", "bankpw"); st != smpp.StatusOK {
		t.Fatalf("bind of the account added by the reload = %v, want 0", st)
	}
	if got := bank.submit(2, keyed("bank-1", "hello")); got.Status != smpp.StatusOK {
		t.Fatalf("submit of the added account = %v, want 0", got.Status)
	}
	wantSMSCTotal(t, smsc, 1)
}

func TestReloadRemovingAnAccountClosesItsSessionsAndRefusesItsBinds(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	next := reloaded(t, cfg, func(c *config.Config) {
		bank := config.AccountDefaults()
		bank.SystemID, bank.Password, bank.Route = "bank", "bankpw", []string{"smsc"}
		c.Accounts = []config.Account{bank}
	})
	r, err := app.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(r.Applied, "account shop removed") || !hasLine(r.Applied, "closed 1 session") {
		t.Errorf("Applied = %q, want shop removed and its session closed", r.Applied)
	}
	select {
	case <-shop.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the removed account's session is still open")
	}
	if st := dialESME(t, app.Addr()).bind(smpp.CmdBindTransceiver, "shop", "secret"); st == smpp.StatusOK {
		t.Error("bind of the removed account succeeded")
	}
}

func TestReloadAppliesAnAccountsNewIdempotencyPolicyToBoundSessions(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	// Before: a submit without a key is forwarded (missing_key: forward).
	if got := shop.submit(2, keyed("", "no key")); got.Status != smpp.StatusOK {
		t.Fatalf("submit without a key = %v, want 0", got.Status)
	}
	next := reloaded(t, cfg, func(c *config.Config) { c.Accounts[0].Idempotency.MissingKey = config.MissingReject })
	if _, err := app.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := shop.submit(3, keyed("", "no key")); got.Status != smpp.StatusMissingTLV {
		t.Errorf("submit without a key after missing_key: reject = %v, want ESME_RMISSINGTLV on the session bound before the reload", got.Status)
	}
}

func TestReloadMovesAnUpstreamToItsNewAddressAfterTheNewBindsAreUp(t *testing.T) {
	oldSMSC := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.Key == "slow" {
			return sim.Action{Delay: 300 * time.Millisecond}
		}
		return sim.Action{}
	}})
	newSMSC := startSim(t, sim.Config{})
	cfg := testConfig(t, oldSMSC.Addr(), t.TempDir())
	cfg.Upstreams[0].ForwardKeyTLV = true // the simulators count by key
	app := startProxy(t, cfg)
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	inFlight := shop.SubmitAsync(t.Context(), esme.Submit{Src: "S", Dst: "1", Key: "slow", Text: []byte("x")})
	testkit.Eventually(t, 5*time.Second, func() bool { return oldSMSC.Total() == 1 }, "the slow submit at the old SMSC")

	oldPool := app.poolsByName()["smsc"]
	next := reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = newSMSC.Addr() })
	r, err := app.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(r.Applied, "upstream smsc changed: address") || slices.ContainsFunc(r.Restart, func(l string) bool { return strings.Contains(l, "smsc") }) {
		t.Errorf("Reload = %+v, want the address change applied, no restart asked for it", r)
	}
	if res := <-inFlight; res.Err != nil || res.Resp.Status != smpp.StatusOK {
		t.Errorf("the submit in flight on the old binds = %+v, want answered 0 (they drain)", res)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return app.poolsByName()["smsc"] != oldPool }, "routes moved to the new binds")
	if got := shop.submit(10, keyed("after", "x")); got.Status != smpp.StatusOK || newSMSC.Total() != 1 {
		t.Errorf("submit after the swap = %v with %d at the new SMSC, want 0 and 1", got.Status, newSMSC.Total())
	}
	if n := oldSMSC.Total(); n != 1 {
		t.Errorf("the old SMSC got %d submits, want only the one in flight before the reload", n)
	}
}

// Two reloads of an upstream in quick succession: the second replaces the
// pool the first started, so once both are in force one pool is left,
// bound to the latest address, and no pool of the first is left binding.
func TestTwoQuickReloadsOfAnUpstreamLeaveOnlyTheLatestPool(t *testing.T) {
	first, second, third := startSim(t, sim.Config{}), startSim(t, sim.Config{}), startSim(t, sim.Config{})
	cfg := testConfig(t, first.Addr(), t.TempDir())
	cfg.Upstreams[0].ForwardKeyTLV = true // the simulators count by key
	app := startProxy(t, cfg)
	toSecond := reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = second.Addr() })
	toThird := reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = third.Addr() })
	for _, c := range []*config.Config{toSecond, toThird} {
		if _, err := app.Reload(c); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		app.mu.Lock()
		defer app.mu.Unlock()
		return len(app.pools) == 1 && app.byName["smsc"] == app.pools[0]
	}, "one pool left for smsc, in the routes")
	shop := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if got := shop.submit(1, keyed("after", "x")); got.Status != smpp.StatusOK || third.Total() != 1 || second.Total() != 0 {
		t.Errorf("submit after both reloads = %v, with %d at the latest SMSC and %d at the one between; want 0, 1 and 0", got.Status, third.Total(), second.Total())
	}
}

// query_sm follows a reload: an account added by it finds its messages
// on the upstreams of its route, as an account configured at start does.
func TestQueryOfAnAccountAddedByReloadReachesItsUpstream(t *testing.T) {
	smsc := startSim(t, sim.Config{HexIDs: true})
	cfg := receiptConfig(t, smsc.Addr())
	app, _ := startReceiptsProxy(t, cfg)
	next := reloaded(t, cfg, func(c *config.Config) {
		late := c.Accounts[0]
		late.SystemID = "late"
		c.Accounts = append(c.Accounts, late)
	})
	if _, err := app.Reload(next); err != nil {
		t.Fatal(err)
	}
	late := bindESME(t, app.Addr(), "late", smpp.BindTransceiver, false)
	id := submitDLR(t, late, "late-1")
	body := append(append(append([]byte(id), 0, 0, 0), "SHOP"...), 0)
	f, err := late.Request(t.Context(), smpp.CmdQuerySM, body)
	if err != nil {
		t.Fatal(err)
	}
	if h := smpp.ParseHeader(f); h.ID != smpp.CmdQuerySM|smpp.RespBit || h.Status != smpp.StatusOK {
		t.Errorf("query_sm of the added account's message = 0x%08X %v, want query_sm_resp 0", h.ID, h.Status)
	}
	if q := smsc.Queried(); len(q) != 1 {
		t.Errorf("the SMSC was asked about %v, want the one message", q)
	}
}

// A pool made by a reload names its sessions apart from the pool it
// replaces (each counts its sessions from 1): an upstream session id, the
// journal's key with the sequence number, never names two pools.
func TestAReloadedUpstreamsSessionsAreNamedApartFromThePoolItReplaces(t *testing.T) {
	first, second := startSim(t, sim.Config{}), startSim(t, sim.Config{})
	cfg := testConfig(t, first.Addr(), t.TempDir())
	app := startProxy(t, cfg)
	ids := func() []string {
		var out []string
		for _, s := range app.Sessions.List() {
			if s.Side == session.SideUpstream && s.Owner == "smsc" {
				out = append(out, s.ID)
			}
		}
		return out
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(ids()) > 0 }, "smsc's sessions listed")
	before := ids()
	if _, err := app.Reload(reloaded(t, cfg, func(c *config.Config) { c.Upstreams[0].Address = second.Addr() })); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		after := ids()
		return len(after) > 0 && !slices.ContainsFunc(after, func(id string) bool { return slices.Contains(before, id) })
	}, "smsc's sessions after the reload, none named as before")
}
