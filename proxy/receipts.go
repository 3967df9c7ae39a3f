package proxy

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// newReceipts builds the receipt and MO service (package dlr) from the
// configuration: per account dlr_retention, dlr_redelivery, message_id and
// route; per upstream resp_id_format, receipt_id_format and echo_tlv;
// mo_routes and default_account. Proxy-issued ids use dlr's default style
// (20 lower-case hex digits). Log lines show fingerprint keys by their tag.
func newReceipts(cfg *config.Config, st state.Store, secret *state.Secret, log *slog.Logger, reg prometheus.Registerer) (*dlr.Service, error) {
	dc := dlr.Config{
		Store:          st,
		Accounts:       map[string]dlr.Account{},
		Upstreams:      map[string]dlr.Upstream{},
		DefaultAccount: cfg.DefaultAccount,
		Logger:         log,
		Registerer:     reg,
		LogKey:         func(k string) string { return dedup.TagKey(k, secret.Tag) },
	}
	for _, a := range cfg.Accounts {
		dc.Accounts[a.SystemID] = dlr.Account{
			Retention:  a.DLRRetention.Std(),
			Redelivery: a.DLRRedelivery.Std(),
			ProxyIDs:   a.MessageID == config.MessageIDProxy,
			ProxyIDStyle: dlr.ProxyIDStyle{
				Format: dlr.Format(a.ProxyID.Format), Length: a.ProxyID.Length,
			},
			Route: a.Route,
		}
	}
	for _, u := range cfg.Upstreams {
		dc.Upstreams[u.Name] = dlr.Upstream{
			RespIDFormat:    dlr.Format(u.RespIDFormat),
			ReceiptIDFormat: dlr.Format(u.ReceiptIDFormat),
			EchoTLV:         uint16(u.EchoTLV),
			ResponseTimeout: u.ResponseTimeout.Std(),
		}
	}
	for _, r := range cfg.MORoutes {
		dc.MORoutes = append(dc.MORoutes, dlr.MORoute{Prefix: r.Prefix, Account: r.Account})
	}
	return dlr.New(dc)
}

// requesters lists the pools by upstream name for query_sm/cancel_sm.
func requesters(pools map[string]*smppclient.Pool) map[string]dlr.Requester {
	out := make(map[string]dlr.Requester, len(pools))
	for name, p := range pools {
		out[name] = p
	}
	return out
}
