// Package querycancel is the link of the ESME request chain that forwards
// query_sm and cancel_sm to the upstream holding the message (SPEC §4):
// the ESME names the message by the id it was given, the record is found
// in the store (by proxy id or by the upstream id, read with msgid), and
// the PDU goes to that upstream with the upstream's id. It imports smpp,
// logx (its rate-limited lines), msgid, smppserver, smppclient (the
// Requester's response) and state. Each query's outcome is a debug line;
// an upstream or the store failing queries is logged once per 10s per
// upstream, with the lines held back since.
package querycancel

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// Requester sends a request to an upstream; *smppclient.Pool implements it
// (Pool.Submit).
type Requester interface {
	Submit(ctx context.Context, preferSession string, build func(seq uint32) []byte, beforeWrite func(session string, seq uint32) error) (smppclient.Response, error)
}

// Config configures the forwarder.
type Config struct {
	// Store finds the records (ByProxyID, ByMessageID).
	Store state.Store
	// IDs reads an ESME's id as each upstream writes it (nil: as-is).
	IDs *msgid.IDs
	// Route is the upstreams of an account, by system_id: where a message
	// is looked for by its upstream id. Called per request, so that the
	// configuration in force (after a reload) is the one used.
	Route func(account string) []string
	// Upstream is the upstream of that name to send to (false: none),
	// called per request as Route.
	Upstream func(name string) (Requester, bool)
	// Logger; nil discards.
	Logger *slog.Logger
}

type forwarder struct {
	cfg Config
	log *slog.Logger
	// warn lets the lines about an upstream or the store failing a query
	// through once per warnEvery per upstream and kind: every query can
	// fail alike, and a bound ESME sends as many as it likes.
	warn *logx.Limiter
}

const warnEvery = 10 * time.Second

// Middleware returns the link of the request chain that forwards query_sm
// and cancel_sm to the upstream holding the message (by upstream name, from
// cfg.Upstream); every other request goes to next.
//
// The ESME names the message by the id it was given: the record is found
// by proxy id (message_id: proxy) or by the upstream id normalised with
// each upstream of the account's route, and must belong to the ESME's
// account. The PDU goes upstream with the upstream's id in place of the
// ESME's and every other byte unchanged; the answer comes back with the
// ESME's id and sequence number. A message the proxy does not know is
// answered ESME_RINVMSGID; one without an upstream id (never accepted)
// ESME_RQUERYFAIL / ESME_RCANCELFAIL; an upstream that cannot be reached
// ESME_RSYSERR. query_sm and cancel_sm need a TX or TRX bind.
func Middleware(cfg Config) smppserver.Middleware {
	if cfg.IDs == nil {
		cfg.IDs, _ = msgid.New(nil, nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &forwarder{cfg: cfg, log: cfg.Logger, warn: logx.NewLimiter(warnEvery, 64, nil)}
	return func(next smppserver.Handler) smppserver.Handler {
		return smppserver.HandlerFunc(func(ctx context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
			var idOff int
			switch r.Header.ID {
			case smpp.CmdQuerySM:
				idOff = 0
			case smpp.CmdCancelSM:
				// service_type first
				i := bytes.IndexByte(r.Frame[smpp.HeaderLen:], 0)
				if i < 0 {
					_ = w.WriteStatus(smpp.StatusInvCmdLen)
					return
				}
				idOff = i + 1
			default:
				next.ServeSMPP(ctx, w, r)
				return
			}
			if !r.Session.BindType().CanTransmit() {
				_ = w.WriteStatus(smpp.StatusInvBndSts)
				return
			}
			_ = w.WriteFrame(s.forwardQuery(ctx, r.Session.Account(), r.Header, r.Frame, idOff))
		})
	}
}

// warnf logs msg at level for kind (an upstream's name, or "store") at
// most once per warnEvery, with the lines held back since.
func (s *forwarder) warnf(log *slog.Logger, level slog.Level, kind, msg string, args ...any) {
	s.warn.Log(log, level, kind+"\x00"+msg, msg, args...)
}

// Statuses answered by the query/cancel forwarder.
const (
	statusQueryFail  smpp.Status = 0x00000067 // ESME_RQUERYFAIL
	statusCancelFail smpp.Status = 0x00000011 // ESME_RCANCELFAIL
)

// forwardQuery returns the answer to the ESME's query_sm or cancel_sm
// frame, whose message_id starts at idOff in the body.
func (s *forwarder) forwardQuery(ctx context.Context, account string, h smpp.Header, frame []byte, idOff int) []byte {
	body := frame[smpp.HeaderLen:]
	end := bytes.IndexByte(body[idOff:], 0)
	if end < 0 || end > 65 {
		return smppserver.StatusResponse(h, smpp.StatusInvCmdLen)
	}
	clientID := string(body[idOff : idOff+end])
	rest := body[idOff+end:] // the NUL and what follows
	log := s.log.With("account", account, "command", commandName(h.ID), "message_id", clientID)
	rec, err := s.lookupClientID(ctx, account, clientID)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			s.warnf(log, slog.LevelError, "store", "querycancel: store lookup for a query failed", "err", err)
			return smppserver.StatusResponse(h, smpp.StatusSysErr)
		}
		log.Debug("querycancel: query for an unknown message id", "status", smpp.StatusInvMsgID.String())
		return smppserver.StatusResponse(h, smpp.StatusInvMsgID)
	}
	up, ok := s.cfg.Upstream(rec.Upstream)
	if rec.MessageID == "" || !ok {
		st := statusQueryFail
		if h.ID == smpp.CmdCancelSM {
			st = statusCancelFail
		}
		log.Debug("querycancel: query for a message without an upstream id", "state", string(rec.State), "status", st.String())
		return smppserver.StatusResponse(h, st)
	}
	out := make([]byte, 0, len(body)+len(rec.MessageID))
	out = append(out, body[:idOff]...)
	out = append(out, rec.MessageID...)
	out = append(out, rest...)
	resp, err := up.Submit(ctx, "", func(seq uint32) []byte { return smpp.EncodeSimple(h.ID, smpp.StatusOK, seq, out) }, nil)
	if err != nil {
		s.warnf(log, slog.LevelWarn, rec.Upstream, "querycancel: query not answered by the upstream", "upstream", rec.Upstream, "err", err)
		return smppserver.StatusResponse(h, smpp.StatusSysErr)
	}
	rh := smpp.ParseHeader(resp.Frame)
	if rh.ID != h.ID|smpp.RespBit { // generic_nack
		log.Debug("querycancel: query refused by the upstream", "upstream", rec.Upstream, "status", rh.Status.String())
		return smppserver.StatusResponse(h, rh.Status)
	}
	rbody := resp.Frame[smpp.HeaderLen:]
	if rh.ID == smpp.CmdQuerySM|smpp.RespBit && len(rbody) > 0 {
		if i := bytes.IndexByte(rbody, 0); i >= 0 {
			rbody = append([]byte(clientID), rbody[i:]...)
		}
	}
	log.Debug("querycancel: query forwarded", "upstream", rec.Upstream, "upstream_message_id", rec.MessageID, "status", rh.Status.String())
	return smpp.EncodeSimple(rh.ID, rh.Status, h.Sequence, rbody)
}

// lookupClientID finds the record of account whose ESME-facing id is id.
func (s *forwarder) lookupClientID(ctx context.Context, account, id string) (*state.Record, error) {
	if id == "" {
		return nil, state.ErrNotFound
	}
	rec, err := s.cfg.Store.ByProxyID(ctx, account, id)
	if !errors.Is(err, state.ErrNotFound) {
		return rec, err
	}
	for _, up := range s.cfg.Route(account) {
		rec, err := s.cfg.Store.ByMessageID(ctx, up, s.cfg.IDs.NormalizeID(up, id))
		switch {
		case err == nil && rec.Key.Account == account && rec.ProxyID == "":
			return rec, nil
		case err != nil && !errors.Is(err, state.ErrNotFound):
			return nil, err
		}
	}
	return nil, state.ErrNotFound
}

func commandName(id uint32) string {
	if id == smpp.CmdCancelSM {
		return "cancel_sm"
	}
	return "query_sm"
}
