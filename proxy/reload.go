package proxy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/smppproxy/smppproxy/config"
)

// config is the configuration in force (New's, or the last Reload's).
func (a *App) config() *config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Reloaded is what a Reload did.
type Reloaded struct {
	// Applied lists the changes now in force, one line each.
	Applied []string `json:"applied"`
	// Restart lists the changes that take effect only after a restart
	// (the listeners, the admin endpoint, the store, the upstream
	// connections); they were not applied.
	Restart []string `json:"restart,omitempty"`
}

// Reload puts a new, validated configuration in force without a restart:
// accounts (added, removed, credentials, networks, throughput, window and
// max_binds for the binds that follow, routes, idempotency policy, message
// ids, receipt settings), MO routes and the default account, and the
// routing weights and retry bounds of upstreams. A removed account's
// sessions are closed. A change Reload cannot apply (see
// Reloaded.Restart) is reported, not applied; the rest still is. The log
// level is the caller's (it owns the logger). Reloads are serialised.
func (a *App) Reload(cfg *config.Config) (Reloaded, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	old := a.config()
	var r Reloaded
	r.Restart = restartOnly(old, cfg)

	ups, styles := idTables(cfg)
	if err := a.ids.Set(ups, styles); err != nil {
		return Reloaded{}, fmt.Errorf("proxy: reload: %w", err)
	}
	accts, mo := receiptAccounts(cfg)
	if err := a.receipts.Reconfigure(accts, mo, cfg.DefaultAccount); err != nil {
		_ = a.ids.Set(idTables(old))
		return Reloaded{}, fmt.Errorf("proxy: reload: %w", err)
	}
	a.auth.setAccounts(cfg.Accounts)
	a.throttles.set(cfg.Accounts)
	a.mu.Lock()
	a.cfg = cfg
	a.mu.Unlock()
	upCfg := map[string]config.Upstream{}
	for _, u := range cfg.Upstreams {
		upCfg[u.Name] = u
	}
	a.instr.router.SetRoutes(a.routes(a.byName, upCfg))

	r.Applied = append(r.Applied, accountChanges(old, cfg)...)
	r.Applied = append(r.Applied, routingChanges(old, cfg)...)
	if !reflect.DeepEqual(old.MORoutes, cfg.MORoutes) || old.DefaultAccount != cfg.DefaultAccount {
		r.Applied = append(r.Applied, "mo_routes / default_account changed")
	}
	if n := a.closeRemovedAccounts(cfg); n > 0 {
		r.Applied = append(r.Applied, fmt.Sprintf("closed %d session(s) of removed accounts", n))
	}
	return r, nil
}

// closeRemovedAccounts closes the ESME sessions whose account cfg no
// longer has, and reports how many.
func (a *App) closeRemovedAccounts(cfg *config.Config) int {
	n := 0
	for _, ss := range a.server.Sessions() {
		if acct := ss.Account(); acct != "" && cfg.Account(acct) == nil {
			ss.Kick()
			n++
		}
	}
	return n
}

// accountChanges names the accounts added, removed and changed from old
// to cfg (a changed account names the keys that differ).
func accountChanges(old, cfg *config.Config) []string {
	var out []string
	for _, acc := range cfg.Accounts {
		prev := old.Account(acc.SystemID)
		switch {
		case prev == nil:
			out = append(out, "account "+acc.SystemID+" added")
		case !reflect.DeepEqual(*prev, acc):
			out = append(out, "account "+acc.SystemID+" changed: "+strings.Join(diffFields(*prev, acc), ", "))
		}
	}
	for _, acc := range old.Accounts {
		if cfg.Account(acc.SystemID) == nil {
			out = append(out, "account "+acc.SystemID+" removed")
		}
	}
	return out
}

// routingChanges names the upstreams whose routing-only settings (weight,
// forward_key_tlv, retry) changed: those apply at once.
func routingChanges(old, cfg *config.Config) []string {
	var out []string
	for _, u := range cfg.Upstreams {
		prev := old.Upstream(u.Name)
		if prev == nil {
			continue
		}
		if fs := diffFields(routingOnly(*prev), routingOnly(u)); len(fs) > 0 {
			out = append(out, "upstream "+u.Name+" changed: "+strings.Join(fs, ", "))
		}
	}
	return out
}

// routingOnly keeps the settings of u that the router reads.
func routingOnly(u config.Upstream) config.Upstream {
	return config.Upstream{Name: u.Name, Weight: u.Weight, ForwardKeyTLV: u.ForwardKeyTLV, Retry: u.Retry}
}

// restartOnly names what changed from old to cfg that only a restart
// applies.
func restartOnly(old, cfg *config.Config) []string {
	var out []string
	for name, pair := range map[string][2]any{
		"listen":               {old.Listen, cfg.Listen},
		"admin":                {old.Admin, cfg.Admin},
		"store":                {old.Store, cfg.Store},
		"log.format":           {old.Log.Format, cfg.Log.Format},
		"log.redact_addresses": {old.Log.RedactAddresses, cfg.Log.RedactAddresses},
		"shutdown_timeout":     {old.ShutdownTimeout, cfg.ShutdownTimeout},
		"proxy_system_id":      {old.ProxySystemID, cfg.ProxySystemID},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			out = append(out, name)
		}
	}
	for _, u := range cfg.Upstreams {
		prev := old.Upstream(u.Name)
		if prev == nil {
			out = append(out, "upstream "+u.Name+" added")
			continue
		}
		a, b := *prev, u
		a.Weight, a.ForwardKeyTLV, a.Retry = 0, false, config.Retry{}
		b.Weight, b.ForwardKeyTLV, b.Retry = 0, false, config.Retry{}
		if fs := diffFields(a, b); len(fs) > 0 {
			out = append(out, "upstream "+u.Name+": "+strings.Join(fs, ", "))
		}
	}
	for _, u := range old.Upstreams {
		if cfg.Upstream(u.Name) == nil {
			out = append(out, "upstream "+u.Name+" removed")
		}
	}
	slices.Sort(out)
	return out
}

// diffFields names the YAML keys whose values differ between two structs
// of one type.
func diffFields[T any](a, b T) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		if reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			continue
		}
		name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			name = va.Type().Field(i).Name
		}
		out = append(out, name)
	}
	return out
}
