package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
)

// testConfig is a proxy on 127.0.0.1:0 with one account (shop/secret) routed
// to one upstream at smsc.
func testConfig(t *testing.T, smsc, dir string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Listen.BindTimeout = config.Duration(2 * time.Second)
	cfg.Store.Path = dir
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = "shop", "secret", []string{"smsc"}
	acc.MaxBinds = 20
	acc.Window = 100
	cfg.Accounts = []config.Account{acc}
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = "smsc", smsc, "proxy", "pw"
	up.Binds, up.Window = 2, 50
	up.ResponseTimeout = config.Duration(500 * time.Millisecond)
	cfg.Upstreams = []config.Upstream{up}
	return cfg
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
	app, err := New(opts)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	if err := app.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(ctx); err != nil {
		t.Fatalf("upstream never bound: %v", err)
	}
	t.Cleanup(app.Close)
	return app
}

func startSim(t *testing.T, cfg sim.Config) *sim.Simulator {
	t.Helper()
	s, err := sim.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// esmeConn is a minimal raw SMPP client: explicit sequence numbers,
// responses correlated by sequence.
type esmeConn struct {
	t    *testing.T
	c    net.Conn
	mu   sync.Mutex
	wait map[uint32]chan []byte
	all  chan []byte // frames nobody waits for
	done chan struct{}
}

func dialESME(t *testing.T, addr string) *esmeConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := &esmeConn{t: t, c: c, wait: map[uint32]chan []byte{}, all: make(chan []byte, 64), done: make(chan struct{})}
	go e.read()
	t.Cleanup(func() { _ = c.Close() })
	return e
}

func (e *esmeConn) read() {
	defer close(e.done)
	r := bufio.NewReader(e.c)
	for {
		f, err := smpp.ReadFrame(r, 1<<20)
		if err != nil {
			return
		}
		h := smpp.ParseHeader(f)
		if h.ID == smpp.CmdEnquireLink {
			_, _ = e.c.Write(smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, 0, h.Sequence, nil))
			continue
		}
		e.mu.Lock()
		ch := e.wait[h.Sequence]
		delete(e.wait, h.Sequence)
		e.mu.Unlock()
		if ch != nil {
			ch <- f
			continue
		}
		select {
		case e.all <- f:
		default:
		}
	}
}

// call sends frame and waits up to d for the response with its sequence.
func (e *esmeConn) call(frame []byte, d time.Duration) ([]byte, error) {
	seq := smpp.ParseHeader(frame).Sequence
	ch := make(chan []byte, 1)
	e.mu.Lock()
	e.wait[seq] = ch
	e.mu.Unlock()
	if _, err := e.c.Write(frame); err != nil {
		return nil, err
	}
	select {
	case f := <-ch:
		return f, nil
	case <-time.After(d):
		e.mu.Lock()
		delete(e.wait, seq)
		e.mu.Unlock()
		return nil, fmt.Errorf("no response to sequence %d within %v", seq, d)
	case <-e.done:
		select { // the response may have come just before the close
		case f := <-ch:
			return f, nil
		default:
		}
		return nil, fmt.Errorf("connection closed")
	}
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
