package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
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
