package querycancel

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// upstream answers every query_sm with its message id, final date,
// state DELIVERED and error 0, and keeps the body it was sent.
type upstream struct{ got []byte }

func (u *upstream) Submit(_ context.Context, _ string, build func(seq uint32) []byte, _ func(string, uint32) error) (smppclient.Response, error) {
	f := build(7)
	u.got = append([]byte(nil), f[smpp.HeaderLen:]...)
	id := f[smpp.HeaderLen : smpp.HeaderLen+bytes.IndexByte(f[smpp.HeaderLen:], 0)]
	body := append(append([]byte(nil), id...), 0, 0, 2, 0)
	return smppclient.Response{Frame: smpp.EncodeSimple(smpp.CmdQuerySM|smpp.RespBit, smpp.StatusOK, 7, body)}, nil
}

func newForwarder(t *testing.T) (*forwarder, *upstream) {
	t.Helper()
	st := state.NewMem(nil)
	ids, err := msgid.New(map[string]msgid.Upstream{"smsc": {RespIDFormat: msgid.Hex, ReceiptIDFormat: msgid.Dec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &state.Record{Key: state.Key{Account: "shop", Key: "k1"}, State: state.Accepted, Upstream: "smsc",
		MessageID: "3E8", NormID: ids.NormalizeID("smsc", "3E8"), Created: now, Updated: now, Expires: now.Add(time.Hour)}
	if _, ok, err := st.Create(context.Background(), r); err != nil || !ok {
		t.Fatal(ok, err)
	}
	up := &upstream{}
	f := &forwarder{cfg: Config{Store: st, IDs: ids, Route: func(string) []string { return []string{"smsc"} }, // shop and bank
		Upstream: func(name string) (Requester, bool) { return up, name == "smsc" }}, log: slog.New(slog.DiscardHandler), warn: logx.NewLimiter(warnEvery, 64, nil)}
	return f, up
}

func querySM(id string) []byte {
	return smpp.EncodeSimple(smpp.CmdQuerySM, smpp.StatusOK, 42, append([]byte(id), 0, 1, 1, 'S', 0))
}

// The ESME names the message by the id it was given; the upstream gets its
// own id in its place, and the ESME gets the answer with its id and its
// sequence number.
func TestQueryGoesUpstreamWithTheUpstreamsID(t *testing.T) {
	f, up := newForwarder(t)
	resp := f.forwardQuery(context.Background(), "shop", smpp.ParseHeader(querySM("3e8")), querySM("3e8"), 0)
	if !bytes.HasPrefix(up.got, []byte("3E8\x00")) {
		t.Errorf("upstream got message_id %q, want 3E8 (as in its submit_sm_resp)", up.got)
	}
	h := smpp.ParseHeader(resp)
	if h.ID != smpp.CmdQuerySM|smpp.RespBit || h.Status != smpp.StatusOK || h.Sequence != 42 {
		t.Fatalf("answer %+v; want query_sm_resp 0 with sequence 42", h)
	}
	if body := resp[smpp.HeaderLen:]; !bytes.HasPrefix(body, []byte("3e8\x00")) {
		t.Errorf("answer names %q; want the ESME's id 3e8", body)
	}
}

// A message the proxy does not know, or that belongs to another account,
// is answered ESME_RINVMSGID without asking the upstream.
func TestQueryForAnotherAccountsMessageIsInvalidMsgID(t *testing.T) {
	f, up := newForwarder(t)
	for _, tc := range []struct{ account, id string }{{"bank", "3e8"}, {"shop", "ffff"}} {
		resp := f.forwardQuery(context.Background(), tc.account, smpp.ParseHeader(querySM(tc.id)), querySM(tc.id), 0)
		if st := smpp.ParseHeader(resp).Status; st != smpp.StatusInvMsgID {
			t.Errorf("%s queries %s: %v, want ESME_RINVMSGID", tc.account, tc.id, st)
		}
	}
	if up.got != nil {
		t.Errorf("the upstream was asked %q", up.got)
	}
}

// unreachable fails every request, as an upstream whose binds are down.
type unreachable struct{}

func (unreachable) Submit(context.Context, string, func(uint32) []byte, func(string, uint32) error) (smppclient.Response, error) {
	return smppclient.Response{}, errors.New("no session bound")
}

// A query is one of an ESME's requests, not an event an operator acts on:
// at the default level it logs nothing when answered, and an upstream that
// cannot answer is logged at most once per interval however many queries
// an ESME sends (from review: a line each, with a string of the ESME's
// choosing, a log flood any bound ESME could make).
func TestQueriesDoNotFloodTheLog(t *testing.T) {
	f, _ := newForwarder(t)
	var buf bytes.Buffer
	f.log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	for range 100 {
		f.forwardQuery(ctx, "shop", smpp.ParseHeader(querySM("nope")), querySM("nope"), 0) // unknown id
		f.forwardQuery(ctx, "shop", smpp.ParseHeader(querySM("3e8")), querySM("3e8"), 0)   // forwarded
	}
	if buf.Len() != 0 {
		t.Errorf("200 queries answered logged at info:\n%s", buf.String())
	}
	f.cfg.Upstream = func(string) (Requester, bool) { return unreachable{}, true }
	for range 100 {
		if h := smpp.ParseHeader(f.forwardQuery(ctx, "shop", smpp.ParseHeader(querySM("3e8")), querySM("3e8"), 0)); h.Status != smpp.StatusSysErr {
			t.Fatalf("query with the upstream unreachable = %v, want ESME_RSYSERR", h.Status)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Errorf("100 queries the upstream could not answer logged %d lines, want 1:\n%s", n, buf.String())
	}
}
