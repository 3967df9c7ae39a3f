package admin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/state"
)

func kept(n int) []dlr.UnmatchedReceipt {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var out []dlr.UnmatchedReceipt
	for i := range n {
		up := "alpha"
		if i%2 == 1 {
			up = "beta"
		}
		out = append(out, dlr.UnmatchedReceipt{
			Upstream: up, Seq: uint64(i + 1), MessageID: fmt.Sprint(9000 + i), Stat: "DELIVRD",
			Received: at.Add(time.Duration(i) * time.Second), Expires: at.Add(72 * time.Hour),
		})
	}
	return out
}

func TestUnmatchedReceiptsEndpoint(t *testing.T) {
	f := &fakeReceipts{kept: kept(5)}
	cl := fakeAdmin(t, admin.Config{Receipts: f})
	ctx := t.Context()

	all, err := cl.Unmatched(ctx, "", 0)
	if err != nil || len(all.Receipts) != 5 || all.Truncated {
		t.Fatalf("Unmatched(\"\", 0) = %+v, %v; want all 5, not truncated", all, err)
	}
	if got := all.Receipts[2]; got != f.kept[2] {
		t.Errorf("Unmatched()[2] = %+v, want %+v", got, f.kept[2])
	}
	// The default limit, plus one to tell whether there are more.
	if f.limits[0] != admin.DefaultListLimit+1 {
		t.Errorf("Unmatched asked the service for %d, want DefaultListLimit+1 = %d", f.limits[0], admin.DefaultListLimit+1)
	}

	beta, err := cl.Unmatched(ctx, "beta", 0)
	if err != nil || len(beta.Receipts) != 2 || beta.Receipts[0].Upstream != "beta" || f.upstreams[1] != "beta" {
		t.Fatalf("Unmatched(beta) = %+v, %v (service asked for %q); want beta's 2", beta, err, f.upstreams[1])
	}

	two, err := cl.Unmatched(ctx, "", 2)
	if err != nil || len(two.Receipts) != 2 || !two.Truncated || two.Receipts[1].Seq != 2 {
		t.Fatalf("Unmatched(limit 2) = %+v, %v; want the first 2, truncated", two, err)
	}
	exact, err := cl.Unmatched(ctx, "", 5)
	if err != nil || len(exact.Receipts) != 5 || exact.Truncated {
		t.Fatalf("Unmatched(limit 5) of 5 = %+v, %v; want 5, not truncated", exact, err)
	}

	none, err := cl.Unmatched(ctx, "gamma", 0)
	if err != nil || none.Receipts == nil || len(none.Receipts) != 0 {
		t.Fatalf("Unmatched(gamma) = %#v, %v; want an empty (not null) list", none, err)
	}
}

func TestUnmatchedReceiptsErrors(t *testing.T) {
	ctx := t.Context()
	without := fakeAdmin(t, admin.Config{})
	if _, err := without.Unmatched(ctx, "", 0); status(err) != http.StatusNotImplemented {
		t.Errorf("Unmatched without Config.Receipts: %v, want HTTP 501", err)
	}
	failing := fakeAdmin(t, admin.Config{Receipts: &fakeReceipts{err: errors.New("state: store closed")}})
	if _, err := failing.Unmatched(ctx, "", 0); status(err) != http.StatusInternalServerError || !strings.Contains(err.Error(), "store closed") {
		t.Errorf("Unmatched with a failing store: %v, want HTTP 500 naming the cause", err)
	}
	f := &fakeReceipts{kept: kept(1)}
	cl := fakeAdmin(t, admin.Config{Receipts: f})
	for _, lim := range []string{"0", "-1", "x", fmt.Sprint(admin.MaxListLimit + 1)} {
		resp, err := http.Get(cl.BaseURL + "/api/v1/receipts/unmatched?limit=" + lim)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("limit=%s: HTTP %d, want 400", lim, resp.StatusCode)
		}
	}
	if len(f.limits) != 0 {
		t.Errorf("bad limits reached the service: %v", f.limits)
	}
	guarded := fakeAdmin(t, admin.Config{Receipts: f, Token: "t0k"})
	guarded.Token = ""
	if _, err := guarded.Unmatched(ctx, "", 0); !errors.Is(err, admin.ErrUnauthorized) {
		t.Errorf("Unmatched without the token: %v, want ErrUnauthorized", err)
	}
}

// The receipts pending of a receiving ESME session is its account's
// receipt queue depth, read from the registry's gauge; transmitters and
// upstream binds have none.
func TestSessionsCarryReceiptsPending(t *testing.T) {
	reg := prometheus.NewRegistry()
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "smppproxy", Subsystem: "receipts", Name: "queue_depth"}, []string{"account"})
	reg.MustRegister(depth)
	depth.WithLabelValues("shop").Set(3)
	depth.WithLabelValues("bank").Set(0)
	sess := fakeSessions{
		{ID: "esme-1", Side: session.SideESME, Owner: "shop", Bind: session.BindRX},
		{ID: "esme-2", Side: session.SideESME, Owner: "shop", Bind: session.BindTX},
		{ID: "esme-3", Side: session.SideESME, Owner: "bank", Bind: session.BindTRX},
		{ID: "esme-4", Side: session.SideESME, Owner: "ghost", Bind: session.BindTRX}, // no queue
		{ID: "up-1", Side: session.SideUpstream, Owner: "shop", Bind: "TRX"},
	}
	cl := fakeAdmin(t, admin.Config{Sessions: sess, Gatherer: reg})
	list, err := cl.Sessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"esme-1": "3", "esme-2": "nil", "esme-3": "0", "esme-4": "nil", "up-1": "nil"}
	for _, s := range list {
		got := "nil"
		if s.ReceiptsPending != nil {
			got = fmt.Sprint(*s.ReceiptsPending)
		}
		if got != want[s.ID] {
			t.Errorf("session %s (%s %s of %s): receipts pending %s, want %s", s.ID, s.Side, s.Bind, s.Owner, got, want[s.ID])
		}
	}

	// On the wire: present (0 included) only where it applies.
	resp, err := http.Get(cl.BaseURL + "/api/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, s := range raw.Sessions {
		_, has := s["receipts_pending"]
		if has != (want[s["id"].(string)] != "nil") {
			t.Errorf("session %v: receipts_pending present = %v", s["id"], has)
		}
	}

	// Without a receipt service nothing is pending anywhere.
	bare := fakeAdmin(t, admin.Config{Sessions: sess})
	list, err = bare.Sessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ReceiptsPending != nil {
			t.Errorf("session %s without a receipt queue gauge: receipts pending %d, want none", s.ID, *s.ReceiptsPending)
		}
	}
}

func TestNewRecordShowsTheReceiptSide(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		rec        state.Record
		wantClient string
	}{
		{"passthrough, delivered", state.Record{State: state.Accepted, MessageID: "1001", Delivery: state.DeliveryDelivered, DeliveryAt: at}, "1001"},
		{"proxy id, delivered", state.Record{State: state.Accepted, MessageID: "1002", ProxyID: "0f3e9a", Delivery: state.DeliveryDelivered, DeliveryAt: at}, "0f3e9a"},
		{"proxy id reserved, unknown", state.Record{State: state.Unknown, ProxyID: "77aa01"}, ""},
		{"rejected", state.Record{State: state.Rejected, Status: 0x0B}, ""},
	} {
		tc.rec.Key = state.Key{Account: "shop", Key: "k:otp-1"}
		got := admin.NewRecord(&tc.rec, nil)
		if got.MessageID != tc.rec.MessageID || got.ProxyID != tc.rec.ProxyID || got.ClientMessageID != tc.wantClient ||
			got.Delivery != string(tc.rec.Delivery) || !got.DeliveryAt.Equal(tc.rec.DeliveryAt) {
			t.Errorf("%s: NewRecord = message %q proxy %q client %q delivery %q at %v; want %q %q %q %q at %v", tc.name,
				got.MessageID, got.ProxyID, got.ClientMessageID, got.Delivery, got.DeliveryAt,
				tc.rec.MessageID, tc.rec.ProxyID, tc.wantClient, tc.rec.Delivery, tc.rec.DeliveryAt)
		}
		b, _ := json.Marshal(got)
		if has := strings.Contains(string(b), `"delivery_at"`); has != !tc.rec.DeliveryAt.IsZero() {
			t.Errorf("%s: JSON %s: delivery_at present = %v", tc.name, b, has)
		}
	}
}

func TestStatsReceiptDeliveries(t *testing.T) {
	reg := prometheus.NewRegistry()
	del := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "smppproxy", Subsystem: "receipts", Name: "deliveries_total"}, []string{"account", "outcome"})
	rcv := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "smppproxy", Subsystem: "receipts", Name: "total"}, []string{"account", "upstream", "outcome"})
	reg.MustRegister(del, rcv)
	del.WithLabelValues("shop", "acked").Add(4)
	del.WithLabelValues("bank", "acked").Add(1)
	del.WithLabelValues("shop", "timeout").Add(2)
	rcv.WithLabelValues("shop", "smsc", "routed").Add(5)
	rcv.WithLabelValues("", "smsc", "unmatched").Add(1)
	st, err := admin.BuildStats(reg)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReceiptDeliveries["acked"] != 5 || st.ReceiptDeliveries["timeout"] != 2 || st.Receipts["routed"] != 5 || st.Receipts["unmatched"] != 1 {
		t.Errorf("BuildStats: receipts %v, deliveries %v; want routed 5 unmatched 1, acked 5 timeout 2", st.Receipts, st.ReceiptDeliveries)
	}
}
