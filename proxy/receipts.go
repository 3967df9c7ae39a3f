package proxy

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/querycancel"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// newIDs builds the message ids (package msgid) shared by the dedup
// engine and the receipts: per upstream resp_id_format and
// receipt_id_format; per account with message_id: proxy its proxy_id
// style (default 20 lower-case hex digits).
func newIDs(cfg *config.Config) (*msgid.IDs, error) {
	return msgid.New(idTables(cfg))
}

// idTables are the id formats of cfg's upstreams and the proxy id styles
// of its accounts (msgid.New, IDs.Set).
func idTables(cfg *config.Config) (map[string]msgid.Upstream, map[string]msgid.ProxyIDStyle) {
	ups := map[string]msgid.Upstream{}
	for _, u := range cfg.Upstreams {
		ups[u.Name] = msgid.Upstream{
			RespIDFormat:    msgid.Format(u.RespIDFormat),
			ReceiptIDFormat: msgid.Format(u.ReceiptIDFormat),
		}
	}
	styles := map[string]msgid.ProxyIDStyle{}
	for _, a := range cfg.Accounts {
		if a.MessageID == config.MessageIDProxy {
			styles[a.SystemID] = msgid.ProxyIDStyle{Format: msgid.Format(a.ProxyID.Format), Length: a.ProxyID.Length}
		}
	}
	return ups, styles
}

// newReceipts builds the receipt and MO service (package dlr) from the
// configuration: per account dlr_retention, dlr_redelivery, dlr_window and route; per
// upstream echo_tlv and response_timeout; mo_routes and default_account.
// Ids are read with ids; ESME sessions come from the server; the engine
// settles unknown records named by kept receipts. Log lines show
// fingerprint keys by their tag.
func (a *App) newReceipts(ids *msgid.IDs, secret *state.Secret, reg prometheus.Registerer) (*dlr.Service, error) {
	cfg := a.cfg
	dc := dlr.Config{
		Store:          a.store,
		Instance:       a.instance,
		IDs:            ids,
		Receivers:      dlr.ServerReceivers(a.server),
		Resolver:       a.engine,
		NotUnknown:     func(err error) bool { return errors.Is(err, dedup.ErrNotUnknown) },
		Keys:           dlr.Keys{OfTLV: dedup.KeyOfTLV, FromTLV: isTLVKey},
		DefaultAccount: cfg.DefaultAccount,
		Logger:         a.log,
		Registerer:     reg,
		LogKey:         func(k string) string { return dedup.TagKey(k, secret.Tag) },
	}
	dc.Accounts, dc.MORoutes = receiptAccounts(cfg)
	dc.Upstreams = receiptUpstreams(cfg, nil, false)
	return dlr.New(dc)
}

// receiptUpstreams is what the receipt service needs of cfg's upstreams:
// their echo_tlv, and their response_timeout (how long a kept receipt
// waits before it may settle an unknown record). An upstream running
// (the receipt service's, before a reload) has keeps its echo_tlv, which
// only a restart changes, and, with keepLonger, its response_timeout when
// longer: the old binds still drain submits under it.
func receiptUpstreams(cfg *config.Config, running map[string]dlr.Upstream, keepLonger bool) map[string]dlr.Upstream {
	ups := map[string]dlr.Upstream{}
	for _, u := range cfg.Upstreams {
		n := dlr.Upstream{EchoTLV: uint16(u.EchoTLV), ResponseTimeout: u.ResponseTimeout.Std()}
		if prev, ok := running[u.Name]; ok {
			n.EchoTLV = prev.EchoTLV
			if keepLonger {
				n.ResponseTimeout = max(n.ResponseTimeout, prev.ResponseTimeout)
			}
		}
		ups[u.Name] = n
	}
	if keepLonger {
		// A removed upstream's old binds drain too: its kept receipts wait
		// as before until they are gone.
		for name, u := range running {
			if _, ok := ups[name]; !ok {
				ups[name] = u
			}
		}
	}
	return ups
}

// receiptAccounts is the receipt configuration of cfg's accounts (per
// account dlr_retention, dlr_redelivery, dlr_window and route) and its mo_routes.
func receiptAccounts(cfg *config.Config) (map[string]dlr.Account, []dlr.MORoute) {
	accts := map[string]dlr.Account{}
	for _, a := range cfg.Accounts {
		accts[a.SystemID] = dlr.Account{
			Retention:  a.DLRRetention.Std(),
			Redelivery: a.DLRRedelivery.Std(),
			Window:     a.DLRWindow,
			Route:      a.Route,
		}
	}
	var mo []dlr.MORoute
	for _, r := range cfg.MORoutes {
		mo = append(mo, dlr.MORoute{Prefix: r.Prefix, Account: r.Account})
	}
	return accts, mo
}

// isTLVKey reports whether a record key was made from a key TLV
// (dedup.KeyOfTLV), for dlr's echo_tlv matching.
func isTLVKey(key string) bool { return strings.HasPrefix(key, dedup.KeyOfTLV(nil)) }

// queryCancel builds the query_sm/cancel_sm link of the request chain
// (package querycancel): each account's route and the pools by upstream
// name, as in force when the request comes (a reload changes them).
func (a *App) queryCancel(st state.Store, ids *msgid.IDs, log *slog.Logger) smppserver.Middleware {
	return querycancel.Middleware(querycancel.Config{Store: st, IDs: ids, Logger: log,
		Route: func(account string) []string {
			if acct := a.config().Account(account); acct != nil {
				return acct.Route
			}
			return nil
		},
		Upstream: func(name string) (querycancel.Requester, bool) {
			a.mu.Lock()
			defer a.mu.Unlock()
			p, ok := a.byName[name]
			return p, ok
		},
	})
}
