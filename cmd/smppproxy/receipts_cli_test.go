package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smpp"
)

// receiptStack is a proxy running in this process on a real Badger
// directory and real TCP, behind the simulator, with the admin API wired
// as serve wires it plus the receipt service. The account shop is given
// proxy-issued message ids.
type receiptStack struct {
	app      *proxy.App
	smsc     *sim.Simulator
	adminURL string
}

func startReceiptStack(t *testing.T) *receiptStack {
	t.Helper()
	smsc, err := sim.Start("127.0.0.1:0", sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(smsc.Close)
	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Store.Path = t.TempDir()
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = "shop", "secret", []string{"smsc"}
	acc.MessageID = config.MessageIDProxy
	acc.DLRRedelivery = config.Duration(time.Second)
	cfg.Accounts = []config.Account{acc}
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = "smsc", smsc.Addr(), "proxy", "pw"
	cfg.Upstreams = []config.Upstream{up}

	reg := prometheus.NewRegistry()
	app, err := proxy.New(proxy.Options{Config: cfg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.NewHandler(admin.Config{
		Sessions: &app.Sessions, Store: app.Store(), Resolver: app.Engine(), Receipts: app.Receipts(),
		Gatherer: reg, Ready: app.Ready,
	}))
	t.Cleanup(srv.Close)
	return &receiptStack{app: app, smsc: smsc, adminURL: srv.URL}
}

// cli runs an admin command against the stack and returns what it printed.
func (s *receiptStack) cli(t *testing.T, args ...string) string {
	t.Helper()
	var out strings.Builder
	app := newApp()
	app.Writer, app.ErrWriter = &out, io.Discard
	if err := app.Run(append(append([]string{"smppproxy"}, args...), "--admin", s.adminURL)); err != nil {
		t.Fatalf("smppproxy %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func (s *receiptStack) cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := s.cli(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("smppproxy %s --json does not parse: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// A receipt for a message submitted through the proxy sets the record's
// delivery state, which keys show and keys list print with the id the
// ESME got; the receipt waits in the account's queue, which sessions list
// shows on the receiving session until the ESME acknowledges it. A
// receipt for a message the proxy never saw is kept, and receipts
// unmatched lists it without its addresses; stats counts both.
func TestCLIReceiptsUnmatchedAndDeliveryState(t *testing.T) {
	s := startReceiptStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tx, err := esme.Dial(ctx, s.app.Addr(), esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindTransmitter, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	resp, err := tx.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Key: "otp-1", Text: []byte("code 4711"), RegisteredDelivery: 1})
	if err != nil || resp.Status != 0 {
		t.Fatalf("submit otp-1: %+v, %v", resp, err)
	}
	var shown admin.RecordList
	s.cliJSON(t, &shown, "keys", "show", "shop", "otp-1")
	rec := shown.Records[0]
	if rec.ProxyID != resp.MessageID || rec.ClientMessageID != resp.MessageID || rec.MessageID == "" || rec.MessageID == resp.MessageID || rec.Delivery != "" {
		t.Fatalf("keys show before the receipt = %+v; want proxy id = client id = %s (what the ESME got), another upstream id, no delivery", rec, resp.MessageID)
	}

	// The receipt names the upstream's id; nobody of shop is receiving.
	if st, err := s.smsc.SendReceipt(ctx, rec.MessageID, "DELIVRD"); err != nil || st != smpp.StatusOK {
		t.Fatalf("receipt for %s: %v, %v", rec.MessageID, st, err)
	}
	s.cliJSON(t, &shown, "keys", "show", "shop", "otp-1")
	rec = shown.Records[0]
	if rec.Delivery != "delivered" || rec.DeliveryAt.IsZero() || rec.State != "accepted" {
		t.Fatalf("keys show after DELIVRD = %+v; want accepted, delivered with its time", rec)
	}
	out := s.cli(t, "keys", "show", "shop", "otp-1")
	t.Logf("smppproxy keys show shop otp-1:\n%s", out)
	for _, want := range []string{"esme got id", resp.MessageID + " (proxy-issued", rec.MessageID + " (the upstream's", "delivered (receipt at", "receipt from smsc: delivered"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys show lacks %q:\n%s", want, out)
		}
	}
	out = s.cli(t, "keys", "list", "--account", "shop")
	t.Logf("smppproxy keys list --account shop:\n%s", out)
	for _, want := range []string{"PROXY ID", "DELIVERY", resp.MessageID, "delivered"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys list lacks %q:\n%s", want, out)
		}
	}

	// The queued receipt is pending for a receiving session until acked.
	rx, err := esme.Dial(ctx, s.app.Addr(), esme.Options{SystemID: "shop", Password: "secret", Bind: smpp.BindReceiver, Timeout: 5 * time.Second, ManualDeliverResp: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var d esme.Deliver
	select {
	case d = <-rx.Receipts():
	case <-ctx.Done():
		t.Fatal("the queued receipt never reached the RX session")
	}
	if d.ReceiptedID != resp.MessageID || d.Stat != "DELIVRD" {
		t.Fatalf("receipt to the ESME names %q (stat %s), want the proxy id %s", d.ReceiptedID, d.Stat, resp.MessageID)
	}
	pendingOf := func() map[string]string { // bind → receipts pending
		var l admin.SessionList
		s.cliJSON(t, &l, "sessions", "list")
		out := map[string]string{}
		for _, x := range l.Sessions {
			if x.Side == session.SideESME {
				out[x.Bind] = "-"
				if x.ReceiptsPending != nil {
					out[x.Bind] = fmt.Sprint(*x.ReceiptsPending)
				}
			}
		}
		return out
	}
	if got := pendingOf(); got["RX"] != "1" || got["TX"] != "-" {
		t.Errorf("receipts pending before the ack = %v, want RX 1, TX -", got)
	}
	out = s.cli(t, "sessions", "list")
	t.Logf("smppproxy sessions list:\n%s", out)
	if !strings.Contains(out, "RECEIPTS PENDING") {
		t.Errorf("sessions list has no RECEIPTS PENDING column:\n%s", out)
	}
	if err := rx.AckDeliver(d.Seq, smpp.StatusOK); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if deadline, _ := ctx.Deadline(); !testkit.Poll(time.Until(deadline), func() bool { got = pendingOf(); return got["RX"] == "0" }) {
		t.Fatalf("receipts pending after the ack = %v, want RX 0", got)
	}

	// A message submitted to the SMSC by someone else (here: directly, as
	// the proxy's own system_id): its receipt reaches the proxy's bind and
	// matches no record.
	_, other := dialSubmit(ctx, t, s.smsc.Addr(), esme.Options{SystemID: "proxy", Password: "pw", Bind: smpp.BindTransmitter, Timeout: 5 * time.Second},
		esme.Submit{Src: "BANK", Dst: "447700900999", Text: []byte("secret 0042"), RegisteredDelivery: 1})
	if st, err := s.smsc.SendReceipt(ctx, other.MessageID, "UNDELIV"); err != nil || st != smpp.StatusOK {
		t.Fatalf("receipt for %s: %v, %v", other.MessageID, st, err)
	}
	var kept admin.UnmatchedList
	s.cliJSON(t, &kept, "receipts", "unmatched")
	if len(kept.Receipts) != 1 || kept.Truncated {
		t.Fatalf("receipts unmatched = %+v, want the one receipt", kept)
	}
	if k := kept.Receipts[0]; k.Upstream != "smsc" || k.MessageID != other.MessageID || k.Stat != "UNDELIV" || k.Received.IsZero() || !k.Expires.After(k.Received) {
		t.Errorf("kept receipt = %+v; want smsc, %s, UNDELIV, received and expiring", k, other.MessageID)
	}
	out = s.cli(t, "receipts", "unmatched")
	t.Logf("smppproxy receipts unmatched:\n%s", out)
	for _, want := range []string{"UPSTREAM", "RECEIPT ID", "STAT", "RECEIVED", "smsc", other.MessageID, "UNDELIV", "1 unmatched receipt(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("receipts unmatched lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"447700900999", "BANK", "secret", "0042"} {
		if strings.Contains(out, never) || strings.Contains(s.cli(t, "receipts", "unmatched", "--json"), never) {
			t.Errorf("receipts unmatched shows %q (message text or an address):\n%s", never, out)
		}
	}
	if out := s.cli(t, "receipts", "unmatched", "--upstream", "nope"); !strings.Contains(out, "0 unmatched receipt(s)") {
		t.Errorf("receipts unmatched --upstream nope:\n%s", out)
	}

	var st admin.Stats
	s.cliJSON(t, &st, "stats")
	if st.Receipts["queued"] != 1 || st.Receipts["unmatched"] != 1 || st.ReceiptDeliveries["acked"] != 1 {
		t.Errorf("stats: receipts %v, deliveries %v; want queued 1, unmatched 1, acked 1", st.Receipts, st.ReceiptDeliveries)
	}
	if q, ok := st.ReceiptQueue["shop"]; !ok || q != 0 {
		t.Errorf("stats: receipt queue %v, want shop 0", st.ReceiptQueue)
	}
	out = s.cli(t, "stats")
	t.Logf("smppproxy stats:\n%s", out)
	for _, want := range []string{"RECEIPTS", "queued 1", "unmatched 1", "sent to ESMEs", "acked 1", "queue (awaiting ESME ack)", "shop 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
}

// The sim's receipt flags reach its configuration.
func TestSimReceiptFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    sim.Config
		wantErr string
	}{
		{args: nil, want: sim.Config{ReceiptRetry: 30 * time.Second}},
		{args: []string{"--receipt-ids", "hex", "--receipt-text-only"}, want: sim.Config{ReceiptIDs: "hex", ReceiptTextOnly: true, ReceiptRetry: 30 * time.Second}},
		{args: []string{"--receipt-ids", "dec", "--hex-ids", "--receipt-retry", "2s"}, want: sim.Config{ReceiptIDs: "dec", HexIDs: true, ReceiptRetry: 2 * time.Second}},
		{args: []string{"--receipt-ids", "as-is", "--receipt-retry", "0"}, want: sim.Config{ReceiptRetry: -1}},
		{args: []string{"--receipt-ids", "octal"}, wantErr: "as-is, hex, dec"},
	} {
		var got sim.Config
		cmd := simCommand()
		cmd.Action = func(c *cli.Context) error {
			var err error
			got, err = simConfig(c)
			return err
		}
		app := &cli.App{Name: "smppproxy", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
		err := app.Run(append([]string{"smppproxy", "sim"}, tc.args...))
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("sim %v: %v, want an error naming %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("sim %v: %v", tc.args, err)
		case got.ReceiptIDs != tc.want.ReceiptIDs || got.ReceiptTextOnly != tc.want.ReceiptTextOnly ||
			got.ReceiptRetry != tc.want.ReceiptRetry || got.HexIDs != tc.want.HexIDs:
			t.Errorf("sim %v: config ReceiptIDs %q TextOnly %v Retry %v HexIDs %v; want %q %v %v %v", tc.args,
				got.ReceiptIDs, got.ReceiptTextOnly, got.ReceiptRetry, got.HexIDs,
				tc.want.ReceiptIDs, tc.want.ReceiptTextOnly, tc.want.ReceiptRetry, tc.want.HexIDs)
		}
	}
}

// --receipt-ids hex --receipt-text-only: a simulator issuing decimal ids
// reports them in hex, in the receipt text only.
func TestSimReceiptFlagsShapeTheReceipt(t *testing.T) {
	var cfg sim.Config
	cmd := simCommand()
	cmd.Action = func(c *cli.Context) (err error) { cfg, err = simConfig(c); return err }
	app := &cli.App{Name: "smppproxy", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run([]string{"smppproxy", "sim", "--receipt-ids", "hex", "--receipt-text-only", "--receipt-retry", "0"}); err != nil {
		t.Fatal(err)
	}
	smsc, err := sim.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer smsc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, r := dialSubmit(ctx, t, smsc.Addr(), esme.Options{SystemID: "acme", Password: "x", Timeout: 5 * time.Second},
		esme.Submit{Src: "ACME", Dst: "447700900001", Text: []byte("hi"), RegisteredDelivery: 1})
	if st, err := smsc.SendReceipt(ctx, r.MessageID, "DELIVRD"); err != nil || st != 0 {
		t.Fatalf("SendReceipt: %v, %v", st, err)
	}
	var n uint64
	if _, err := fmt.Sscan(r.MessageID, &n); err != nil {
		t.Fatalf("message id %q is not decimal: %v", r.MessageID, err)
	}
	select {
	case d := <-c.Receipts():
		if _, ok := d.TLV(smpp.TagReceiptedMessageID); ok {
			t.Errorf("receipt carries receipted_message_id despite --receipt-text-only")
		}
		if want := fmt.Sprintf("%x", n); d.ReceiptedID != want {
			t.Errorf("receipt text id %q, want %s (hex of %s)", d.ReceiptedID, want, r.MessageID)
		}
	case <-ctx.Done():
		t.Fatal("no receipt")
	}
}
