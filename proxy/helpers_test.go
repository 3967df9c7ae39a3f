package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
	"golang.org/x/crypto/bcrypt"
)

// testConfig is a proxy on 127.0.0.1:0 with one account (shop/secret) routed
// to one upstream at smsc.
func testConfig(t *testing.T, smsc, dir string) *config.Config {
	t.Helper()
	return proxytest.Config(smsc, dir)
}

// startProxy runs a proxy on a real Badger store in dir and waits for its
// upstream binds.
func startProxy(t *testing.T, cfg *config.Config) *App {
	t.Helper()
	return startProxyWith(t, Options{Config: cfg})
}

// startProxyWith is startProxy with every option of New.
func startProxyWith(t *testing.T, opts Options) *App {
	t.Helper()
	return proxytest.Run(t, func() (*App, error) { return New(opts) })
}

// startSimProxy runs a simulator with simCfg and a proxy of testConfig in
// front of it, on a store in t.TempDir.
func startSimProxy(t *testing.T, simCfg sim.Config) (*sim.Simulator, *App) {
	t.Helper()
	env := proxytest.Start(t, func(cfg *config.Config) (*App, error) { return New(Options{Config: cfg}) }, proxytest.WithSim(simCfg))
	return env.Sim, env.Proxy
}

// simConfig runs a simulator with simCfg and returns it with testConfig on
// its address and a store in t.TempDir.
func simConfig(t *testing.T, simCfg sim.Config) (*sim.Simulator, *config.Config) {
	t.Helper()
	smsc := startSim(t, simCfg)
	return smsc, testConfig(t, smsc.Addr(), t.TempDir())
}

// faultWhile is a simulator fault hook that answers every submit with act
// while on holds, and normally once it does not.
func faultWhile(on *atomic.Bool, act sim.Action) func(sim.Call) sim.Action {
	return func(sim.Call) sim.Action {
		if on.Load() {
			return act
		}
		return sim.Action{}
	}
}

func startSim(t *testing.T, cfg sim.Config) *sim.Simulator {
	t.Helper()
	return proxytest.StartSim(t, cfg)
}

// esmeConn is a raw SMPP client (package esme, not bound by Dial): frames
// go out as given, responses are correlated by their sequence number;
// enquire_link and unbind are answered (unbind then closes), deliver_sm is
// left unanswered.
type esmeConn struct {
	*esme.Client
	t *testing.T
}

func dialESME(t *testing.T, addr string) *esmeConn {
	t.Helper()
	c, err := esme.Dial(t.Context(), addr, esme.Options{NoBind: true, ManualDeliverResp: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &esmeConn{Client: c, t: t}
}

// dialBound dials addr and binds as shop/secret with cmd; like bind, it
// leaves the bind_resp status to the test.
func dialBound(t *testing.T, addr string, cmd uint32) *esmeConn {
	t.Helper()
	c := dialESME(t, addr)
	c.bind(cmd, "shop", "secret")
	return c
}

// wantSMSCTotal checks that the SMSC received want submits in all.
func wantSMSCTotal(t *testing.T, smsc *sim.Simulator, want int64) {
	t.Helper()
	if n := smsc.Total(); n != want {
		t.Errorf("submits at the SMSC = %d, want %d", n, want)
	}
}

// call sends frame and waits up to d for the response with its sequence.
func (e *esmeConn) call(frame []byte, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return e.Do(ctx, frame)
}

func bindBody(id, pw string) []byte {
	b := append([]byte(id), 0)
	b = append(append(b, pw...), 0)
	b = append(b, 0)          // system_type
	b = append(b, 0x34, 0, 0) // version, ton, npi
	return append(b, 0)       // address_range
}

func (e *esmeConn) bind(cmd uint32, id, pw string) smpp.Status {
	e.t.Helper()
	f, err := e.call(smpp.EncodeSimple(cmd, 0, 1, bindBody(id, pw)), 5*time.Second)
	if err != nil {
		e.t.Fatalf("bind: %v", err)
	}
	return smpp.ParseHeader(f).Status
}

type resp struct {
	Status smpp.Status
	ID     string
	Seq    uint32
	Cmd    uint32
}

func parseResp(f []byte) resp {
	h := smpp.ParseHeader(f)
	r := resp{Status: h.Status, Seq: h.Sequence, Cmd: h.ID}
	if len(f) > smpp.HeaderLen {
		body := f[smpp.HeaderLen:]
		for i, c := range body {
			if c == 0 {
				body = body[:i]
				break
			}
		}
		r.ID = string(body)
	}
	return r
}

func keyed(key, text string) smpptest.SubmitFields {
	f := smpptest.SubmitFields{Src: "SHOP", Dst: "447700900123", RegisteredDelivery: 1, ShortMessage: []byte(text)}
	if key != "" {
		f.TLVs = []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte(key)}}
	}
	return f
}

func (e *esmeConn) submit(seq uint32, f smpptest.SubmitFields) resp {
	e.t.Helper()
	fr, err := e.call(smpptest.EncodeSubmit(seq, f), 10*time.Second)
	if err != nil {
		e.t.Fatalf("submit seq %d: %v", seq, err)
	}
	return parseResp(fr)
}

// Helpers of the authenticator's unit tests.

func hashOf(t *testing.T, pw string, cost int) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func account(id, pw, hash string) config.Account {
	a := config.AccountDefaults()
	a.SystemID, a.Password, a.PasswordHash, a.Route = id, pw, hash, []string{"smsc"}
	return a
}

func bindFrom(ip, systemID, pw string) smppserver.BindRequest {
	return smppserver.BindRequest{
		SystemID: systemID, Password: pw, Type: smpp.BindTransceiver,
		Remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000},
	}
}

// testAccountAuth is an accountAuth with a fake clock and a delay function that
// records the delays instead of waiting them out.
func testAccountAuth(log *slog.Logger, accts []config.Account) (*accountAuth, *testkit.Clock, *[]time.Duration) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var (
		mu     sync.Mutex
		delays []time.Duration
	)
	a := newAccountAuth(log, accts, clock.Now)
	a.sleep = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		delays = append(delays, d)
	}
	return a, clock, &delays
}

// Helpers of the receipt end-to-end tests: a real proxy on a
// real Badger directory, the simulator as SMSC, esme clients as ESMEs.

// startReceiptsProxy runs a proxy with its own metrics registry.
func startReceiptsProxy(t *testing.T, cfg *config.Config) (*App, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return startProxyWith(t, Options{Config: cfg, Registerer: reg}), reg
}

// receiptConfig is testConfig with short receipt timings and a second
// account, bank/secret, on the same upstream.
func receiptConfig(t *testing.T, smsc string) *config.Config {
	t.Helper()
	cfg := testConfig(t, smsc, t.TempDir())
	cfg.Accounts[0].DLRRedelivery = config.Duration(time.Second)
	bank := cfg.Accounts[0]
	bank.SystemID = "bank"
	cfg.Accounts = append(cfg.Accounts, bank)
	return cfg
}

// metric returns the value of the counter or gauge name with labels.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return proxytest.Metric(t, reg, name, labels)
}

// bindESME binds account (password secret) with bind type bt.
func bindESME(t *testing.T, addr, account string, bt smpp.BindType, manual bool) *esme.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := esme.Dial(ctx, addr, esme.Options{SystemID: account, Password: "secret", Bind: bt, Timeout: 5 * time.Second, ManualDeliverResp: manual})
	if err != nil {
		t.Fatalf("bind %s as %s: %v", bt, account, err)
	}
	t.Cleanup(c.Close)
	return c
}

// submitDLR submits a message asking for a receipt and returns its id.
func submitDLR(t *testing.T, c *esme.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Text: []byte("order " + key + " shipped"), Key: key, RegisteredDelivery: 1})
	if err != nil || r.Status != 0 || r.MessageID == "" {
		t.Fatalf("submit %s = %+v, %v; want status 0 with an id", key, r, err)
	}
	return r.MessageID
}

// receive collects n deliver_sm from c within d.
func receive(t *testing.T, c *esme.Client, n int, d time.Duration) []esme.Deliver {
	t.Helper()
	var out []esme.Deliver
	timeout := time.After(d)
	for len(out) < n {
		select {
		case r := <-c.Receipts():
			out = append(out, r)
		case <-timeout:
			t.Fatalf("received %d deliver_sm within %v, want %d", len(out), d, n)
		}
	}
	return out
}

// none checks that c receives nothing more within d.
func none(t *testing.T, c *esme.Client, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-c.Receipts():
		t.Errorf("%s: unexpected deliver_sm (receipt id %q, stat %s)", what, r.ReceiptedID, r.Stat)
	case <-time.After(d):
	}
}

// textID is the id: field of a receipt's text.
func textID(d esme.Deliver) string {
	r, _ := dlr.ParseReceiptText(d.Text)
	return r.ID
}

// tlvID is the receipted_message_id TLV of a receipt ("" when absent).
func tlvID(d esme.Deliver) string {
	v, ok := d.TLV(0x001E)
	if !ok {
		return ""
	}
	return strings.TrimRight(string(v), "\x00")
}

// recordOf returns the record whose ESME-facing message id is id.
func recordOf(t *testing.T, st state.Store, id string) *state.Record {
	t.Helper()
	var found *state.Record
	err := st.Scan(context.Background(), func(r *state.Record) bool {
		if r.ClientMessageID() == id {
			found = r
			return false
		}
		return true
	})
	if err != nil || found == nil {
		t.Fatalf("no record with message id %q (%v)", id, err)
	}
	return found
}

// queued returns the entries waiting in account's delivery queue.
func queued(t *testing.T, st state.Store, account string) []*state.QueueEntry {
	t.Helper()
	es, err := st.(state.Queue).List(context.Background(), "esme/"+account, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// submitForReceipts submits the n keys of keys(prefix, n) on tx, asking
// for receipts, and returns their message ids.
func submitForReceipts(t *testing.T, tx *esme.Client, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for _, k := range keys(prefix, n) {
		ids = append(ids, submitDLR(t, tx, k))
	}
	return ids
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}
