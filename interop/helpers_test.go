package interop

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu"
	"github.com/fiorix/go-smpp/smpp/pdu/pdufield"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutlv"
	"github.com/fiorix/go-smpp/smpp/smpptest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/proxy"
)

// keyTag is the proxy's default idempotency key TLV.
const keyTag = pdutlv.Tag(0x1400)

// Upstream credentials: smpptest's defaults (the simulator accepts any).
var (
	upUser = smpptest.DefaultUser
	upPass = smpptest.DefaultPasswd
)

// testConfig is proxytest's configuration (one account shop/secret routed
// to one upstream at smsc) with smpptest's upstream credentials, a 2s
// upstream response timeout and 1s receipt redelivery.
func testConfig(t *testing.T, smsc string) *config.Config {
	t.Helper()
	cfg := proxytest.Config(smsc, t.TempDir())
	cfg.Accounts[0].DLRRedelivery = config.Duration(time.Second)
	up := &cfg.Upstreams[0]
	up.SystemID, up.Password = upUser, upPass
	up.ResponseTimeout = config.Duration(2 * time.Second)
	return cfg
}

// startProxy runs a proxy on a real Badger store and waits for its
// upstream binds. Registered before the clients, it is closed after them.
func startProxy(t *testing.T, cfg *config.Config) *proxy.App {
	t.Helper()
	return startProxyMetrics(t, cfg, nil)
}

// startProxyMetrics is startProxy with the proxy's metrics in reg.
func startProxyMetrics(t *testing.T, cfg *config.Config, reg *prometheus.Registry) *proxy.App {
	t.Helper()
	opts := proxy.Options{Config: cfg}
	if reg != nil {
		opts.Registerer = reg
	}
	return proxytest.Run(t, func() (*proxy.App, error) { return proxy.New(opts) })
}

// startSimProxy runs a simulator with simCfg and a proxy of testConfig in
// front of it.
func startSimProxy(t *testing.T, simCfg sim.Config) (*sim.Simulator, *proxy.App) {
	t.Helper()
	smsc := startSim(t, simCfg)
	return smsc, startProxy(t, testConfig(t, smsc.Addr()))
}

func startSim(t *testing.T, cfg sim.Config) *sim.Simulator {
	t.Helper()
	return proxytest.StartSim(t, cfg)
}

// ---- fiorix as the ESME ----

// receiptSink collects what fiorix Transceivers hand their Handler.
type receiptSink struct {
	ch chan fiorixDeliver
	// unbinds counts unbind requests from the proxy (fiorix hands them to
	// the handler and never answers them).
	unbinds atomic.Int32
}

// fiorixDeliver is a deliver_sm as fiorix decoded it.
type fiorixDeliver struct {
	esmClass    byte
	receiptedID string // receipted_message_id TLV, "" when absent
	hasTLV      bool
	text        string
}

func newReceiptSink() *receiptSink { return &receiptSink{ch: make(chan fiorixDeliver, 4096)} }

// handle is a fsmpp.HandlerFunc. fiorix calls it from its only reader
// goroutine for every PDU no request waits for (unbind_resp included) and
// answers deliver_sm itself once it returns, so it must not block.
func (s *receiptSink) handle(p pdu.Body) {
	if p.Header().ID == pdu.UnbindID {
		s.unbinds.Add(1)
	}
	if p.Header().ID != pdu.DeliverSMID {
		return
	}
	d := fiorixDeliver{}
	if f := p.Fields()[pdufield.ESMClass]; f != nil && len(f.Bytes()) == 1 {
		d.esmClass = f.Bytes()[0]
	}
	if f := p.Fields()[pdufield.ShortMessage]; f != nil {
		d.text = string(f.Bytes())
	}
	if v, ok := p.TLVFields()[pdutlv.TagReceiptedMessageID]; ok {
		d.hasTLV, d.receiptedID = true, v.String() // String drops the trailing NUL
	}
	select {
	case s.ch <- d:
	default:
	}
}

// next waits up to d for a deliver_sm.
func (s *receiptSink) next(t *testing.T, d time.Duration) fiorixDeliver {
	t.Helper()
	select {
	case r := <-s.ch:
		return r
	case <-time.After(d):
		t.Fatalf("no deliver_sm reached the fiorix client within %v", d)
	}
	return fiorixDeliver{}
}

// dialFiorix binds a fiorix Transceiver to the proxy as shop/secret.
//
// Quirks handled here:
//   - Bind returns at once and reports on a channel (Connected, or
//     BindFailed/Disconnected and a retry after BindInterval).
//   - A reconnection reassigns the client's inbox channel while its PDU
//     dispatcher still reads it: a data race inside fiorix that -race
//     reports. BindInterval is a minute so that no test reconnects; a
//     session lost by mistake then shows as a failed assertion, not as a
//     race report in fiorix code. Clients are closed before the proxy
//     (t.Cleanup is LIFO).
//   - Its enquire_link period is at least 10s, which no test reaches.
//   - RespTimeout defaults to 1s, too short under -race.
//   - It never answers an unbind from the server (the PDU goes to Handler).
//   - Close sends unbind and waits (up to 1s) for the proxy to close.
func dialFiorix(t *testing.T, addr string, sink *receiptSink) *fsmpp.Transceiver {
	t.Helper()
	tc := &fsmpp.Transceiver{
		Addr: addr, User: "shop", Passwd: "secret",
		RespTimeout:  5 * time.Second,
		BindInterval: time.Minute,
	}
	if sink != nil {
		tc.Handler = sink.handle
	}
	status := tc.Bind()
	t.Cleanup(func() { _ = tc.Close() })
	select {
	case st := <-status:
		if st.Status() != fsmpp.Connected {
			t.Fatalf("fiorix bind: %v (%v)", st.Status(), st.Error())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fiorix bind: no status within 5s")
	}
	return tc
}

// keyed is a fiorix short message carrying the idempotency key TLV.
func keyed(key any, text pdutext.Codec) *fsmpp.ShortMessage {
	return &fsmpp.ShortMessage{
		Src: "SHOP", Dst: "447700900123", Text: text,
		Register:  pdufield.FinalDeliveryReceipt,
		TLVFields: pdutlv.Fields{keyTag: key},
	}
}

// ---- fiorix smpptest as the upstream SMSC ----

// received is one submit_sm as smpptest decoded it.
type received struct {
	srcAddr, dstAddr string
	dataCoding       byte
	esmClass         byte
	registered       byte
	shortMessage     []byte
	tlvs             map[pdutlv.Tag][]byte
	messageID        string
}

// fiorixSMSC is a fiorix smpptest.Server that answers submit_sm with
// message ids ("F1", "F2", …), counts them and optionally sends a
// DELIVRD receipt right after the response.
//
// smpptest quirks handled here: its handler is called sequentially per
// connection, and is the only writer of a connection once the bind is
// answered (so replies are written from it, never from elsewhere: its
// Conn has no write lock); its default handler echoes every PDU, so
// enquire_link and unbind are answered explicitly; its bind_resp does not
// carry the bind's sequence_number (gosmpp's connector does not check
// it); Close only closes the listener, the proxy closes the connections.
type fiorixSMSC struct {
	srv *smpptest.Server
	smscOptions

	mu           sync.Mutex
	submits      []received
	deliverResp  map[uint32]pdu.Status // deliver_sm sequence → the proxy's answer
	dlrSeq       map[uint32]string     // deliver_sm sequence → message id
	other        []pdu.ID
	enquireLinks int
}

// smscOptions are fixed before the server starts (its handlers read them
// unlocked).
type smscOptions struct {
	// receipts: send a receipt for every submit that asks for one,
	// immediately after its submit_sm_resp, on the same connection.
	receipts bool
	// disconnect, when it returns true for a submit, closes the
	// connection instead of answering (the submit is still recorded).
	disconnect func(r received) bool
}

func startFiorixSMSC(t *testing.T, opts smscOptions) *fiorixSMSC {
	t.Helper()
	s := &fiorixSMSC{smscOptions: opts, deliverResp: map[uint32]pdu.Status{}, dlrSeq: map[uint32]string{}}
	s.srv = smpptest.NewUnstartedServer()
	s.srv.Handler = s.handle
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fiorixSMSC) Addr() string { return s.srv.Addr() }

func (s *fiorixSMSC) handle(c smpptest.Conn, m pdu.Body) {
	h := m.Header()
	switch h.ID {
	case pdu.SubmitSMID:
		r := decodeReceived(m)
		s.mu.Lock()
		r.messageID = "F" + strconv.Itoa(len(s.submits)+1)
		s.submits = append(s.submits, r)
		s.mu.Unlock()
		if s.disconnect != nil && s.disconnect(r) {
			_ = c.Close()
			return
		}
		resp := pdu.NewSubmitSMResp()
		resp.Header().Seq = h.Seq
		_ = resp.Fields().Set(pdufield.MessageID, r.messageID)
		_ = c.Write(resp)
		if s.receipts && r.registered&0x01 != 0 {
			dlr := receiptPDU(r)
			s.mu.Lock()
			s.dlrSeq[dlr.Header().Seq] = r.messageID
			s.mu.Unlock()
			_ = c.Write(dlr)
		}
	case pdu.DeliverSMRespID:
		s.mu.Lock()
		s.deliverResp[h.Seq] = h.Status
		s.mu.Unlock()
	case pdu.EnquireLinkID:
		s.mu.Lock()
		s.enquireLinks++
		s.mu.Unlock()
		_ = c.Write(pdu.NewEnquireLinkRespSeq(h.Seq))
	case pdu.UnbindID:
		resp := pdu.NewUnbindResp()
		resp.Header().Seq = h.Seq
		_ = c.Write(resp)
	default:
		s.mu.Lock()
		s.other = append(s.other, h.ID)
		s.mu.Unlock()
		nack := pdu.NewGenericNACK()
		nack.Header().Seq = h.Seq
		nack.Header().Status = 0x03
		_ = c.Write(nack)
	}
}

func decodeReceived(m pdu.Body) received {
	f := m.Fields()
	str := func(n pdufield.Name) string {
		if v := f[n]; v != nil {
			return v.String()
		}
		return ""
	}
	byt := func(n pdufield.Name) byte {
		if v := f[n]; v != nil && len(v.Bytes()) == 1 {
			return v.Bytes()[0]
		}
		return 0xFF
	}
	r := received{
		srcAddr: str(pdufield.SourceAddr), dstAddr: str(pdufield.DestinationAddr),
		dataCoding: byt(pdufield.DataCoding), esmClass: byt(pdufield.ESMClass),
		registered: byt(pdufield.RegisteredDelivery), tlvs: map[pdutlv.Tag][]byte{},
	}
	if v := f[pdufield.ShortMessage]; v != nil {
		r.shortMessage = append([]byte(nil), v.Bytes()...)
	}
	for tag, v := range m.TLVFields() {
		r.tlvs[tag] = append([]byte(nil), v.Bytes()...)
	}
	return r
}

// receiptPDU is a DELIVRD receipt for r as a fiorix SMSC writes it:
// addresses swapped, esm_class 0x04, the conventional text, and the
// receipted_message_id (C-octet string) and message_state TLVs.
func receiptPDU(r received) pdu.Body {
	p := pdu.NewDeliverSM()
	f := p.Fields()
	_ = f.Set(pdufield.SourceAddr, r.dstAddr)
	_ = f.Set(pdufield.DestinationAddr, r.srcAddr)
	_ = f.Set(pdufield.ESMClass, uint8(0x04))
	now := time.Now().Format("0601021504")
	text := fmt.Sprintf("id:%s sub:001 dlvrd:001 submit date:%s done date:%s stat:DELIVRD err:000 text:", r.messageID, now, now)
	_ = f.Set(pdufield.ShortMessage, pdutext.Raw(text))
	_ = p.TLVFields().Set(pdutlv.TagReceiptedMessageID, pdutlv.CString(r.messageID))
	_ = p.TLVFields().Set(pdutlv.TagMessageStateOption, uint8(2)) // 0x0427 message_state: DELIVERED
	return p
}

func (s *fiorixSMSC) Submits() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.submits...)
}

// wantSubmits fails the test unless the SMSC received n submit_sm, and
// returns them.
func (s *fiorixSMSC) wantSubmits(t *testing.T, n int) []received {
	t.Helper()
	subs := s.Submits()
	if len(subs) != n {
		t.Fatalf("smpptest received %d submit_sm, want %d", len(subs), n)
	}
	return subs
}

// wantStatus checks that err is the fiorix error of an SMPP status want.
func wantStatus(t *testing.T, err error, want pdu.Status, what string) {
	t.Helper()
	var st pdu.Status
	if !errors.As(err, &st) || st != want {
		t.Errorf("%s: err %v (%T), want pdu.Status %#x", what, err, err, uint32(want))
	}
}

// Acked is how many receipts the proxy answered with status 0.
func (s *fiorixSMSC) Acked() (sent, ok int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq := range s.dlrSeq {
		if st, answered := s.deliverResp[seq]; answered && st == 0 {
			ok++
		}
	}
	return len(s.dlrSeq), ok
}

func (s *fiorixSMSC) EnquireLinks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enquireLinks
}

func (s *fiorixSMSC) Other() []pdu.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pdu.ID(nil), s.other...)
}

// counter sums the counter name over the series carrying labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return proxytest.Metric(t, reg, name, labels)
}
