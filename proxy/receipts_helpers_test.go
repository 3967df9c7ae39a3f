package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/esme"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

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

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}
