package proxy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/route"
	"github.com/smppproxy/smppproxy/smppclient"
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
	// (the listeners, the admin endpoint, the store, an upstream's
	// echo_tlv); they were not applied.
	Restart []string `json:"restart,omitempty"`
}

// Reload puts a new, validated configuration in force without a restart:
// accounts (added, removed, credentials, networks, throughput, window and
// max_binds for the binds that follow, routes, idempotency policy, message
// ids, receipt settings), MO routes and the default account, the routing
// weights and retry bounds of upstreams, and upstreams added, removed or
// with new connection settings: a new pool binds first, routes move to it
// once its binds are up, and the pool it replaces drains its in-flight
// submits and closes (in the background). A removed account's sessions
// are closed. A change Reload cannot apply (see Reloaded.Restart: the
// listeners, the admin endpoint, the store, log format, an upstream's
// echo_tlv) is reported, not applied; the rest still is. The log level is
// the caller's (it owns the logger). Reloads are serialised, their pool
// swaps included: a reload first waits for the previous one's swaps to
// complete, so it replaces the pools in force and no two set the routes
// at once.
func (a *App) Reload(cfg *config.Config) (Reloaded, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	// The previous reload's swaps first, unless the proxy shuts down
	// meanwhile: then nothing is applied.
	prevDone := make(chan struct{})
	go func() { a.bg.Wait(); close(prevDone) }()
	select {
	case <-prevDone:
	case <-a.stopBG:
	}
	select {
	case <-a.stopBG:
		return Reloaded{}, ErrShuttingDown
	default:
	}
	old := a.config()
	var r Reloaded
	// Against the configuration started with: a reload put the rest of
	// the file in force, not what needs a restart, which a second reload
	// of the same file must name again.
	r.Restart = restartOnly(a.started, cfg)

	// What can fail comes first, so that a reload that fails changes
	// nothing: the new pools (an upstream's TLS files), the id tables,
	// the receipt accounts.
	swaps, swapped, err := a.planUpstreams(old, cfg)
	if err != nil {
		return Reloaded{}, fmt.Errorf("proxy: reload: %w", err)
	}
	ups, styles := idTables(cfg)
	if err := a.ids.Set(ups, styles); err != nil {
		closePlanned(swaps)
		return Reloaded{}, fmt.Errorf("proxy: reload: %w", err)
	}
	accts, mo := receiptAccounts(cfg)
	running := a.receipts.Upstreams()
	if err := a.receipts.Reconfigure(accts, mo, cfg.DefaultAccount, receiptUpstreams(cfg, running, true)); err != nil {
		_ = a.ids.Set(idTables(old))
		closePlanned(swaps)
		return Reloaded{}, fmt.Errorf("proxy: reload: %w", err)
	}
	a.auth.setAccounts(cfg.Accounts)
	a.throttles.set(cfg.Accounts)
	a.mu.Lock()
	a.cfg = cfg
	a.mu.Unlock()
	a.engine.SetOwnerWriteHorizon(ownerWriteHorizon(cfg))
	a.server.SetUnbindWait(unbindWait(cfg))
	a.instr.router.SetRoutes(a.reloadRoutes(old, cfg))
	a.startSwaps(swaps)
	r.Applied = append(r.Applied, swapped...)
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

// reloadRoutes is the routes of cfg over the pools in force, but an
// account none of whose new route's upstreams has a pool yet (added by
// this reload, still binding) keeps its routes of old until
// completeSwaps moves it: it would have no route at all meanwhile.
func (a *App) reloadRoutes(old, cfg *config.Config) map[string][]route.Member {
	byName := a.poolsByName()
	routes := a.routesOf(cfg, byName)
	before := a.routesOf(old, byName)
	for _, acc := range cfg.Accounts {
		if len(routes[acc.SystemID]) == 0 && len(before[acc.SystemID]) > 0 {
			routes[acc.SystemID] = before[acc.SystemID]
		}
	}
	return routes
}

// ErrShuttingDown: Reload was called, or waited, while the proxy shut
// down; nothing was applied.
var ErrShuttingDown = errors.New("proxy: shutting down: reload not applied")

// upstreamSwapWait bounds how long a reload waits for the binds of a new
// or changed upstream before its routes move to it anyway.
const upstreamSwapWait = 30 * time.Second

// poolSwap is an upstream pool a reload puts in place of another: next is
// nil for a removed upstream, prev for an added one.
type poolSwap struct {
	name       string
	next, prev *smppclient.Pool
	drain      time.Duration // the longest prev's in-flight submits wait (its response_timeout)
}

// planUpstreams builds (and does not start) a pool for every upstream
// added, or whose connection settings changed (address, credentials,
// binds, window, limits, timeouts, TLS), and lists the swaps with the
// removed upstreams; nothing is in force yet, and on an error nothing is
// left behind.
func (a *App) planUpstreams(old, cfg *config.Config) ([]poolSwap, []string, error) {
	var swaps []poolSwap
	var out []string
	byName := a.poolsByName()
	for _, u := range cfg.Upstreams {
		prev := old.Upstream(u.Name)
		var changes []string
		if prev != nil {
			if changes = connectionChanges(*prev, u); len(changes) == 0 {
				continue
			}
		}
		// A pool of its own in the session ids: its sessions count from 1
		// again, and must not repeat the ids of the pool it replaces.
		p, err := a.newPool(u, fmt.Sprintf("%s.r%d", a.sessionInstance, a.reloadedPools.Add(1)), a.now)
		if err != nil {
			closePlanned(swaps)
			return nil, nil, err
		}
		if prev == nil {
			out = append(out, "upstream "+u.Name+" added: binding, routes use it once bound")
		} else {
			out = append(out, "upstream "+u.Name+" changed: "+strings.Join(changes, ", ")+": new binds come up, then the old ones drain")
		}
		sw := poolSwap{name: u.Name, next: p, prev: byName[u.Name]}
		if prev != nil {
			sw.drain = prev.ResponseTimeout.Std()
		}
		swaps = append(swaps, sw)
	}
	for _, u := range old.Upstreams {
		if cfg.Upstream(u.Name) == nil {
			out = append(out, "upstream "+u.Name+" removed: its binds drain and close")
			swaps = append(swaps, poolSwap{name: u.Name, prev: byName[u.Name], drain: u.ResponseTimeout.Std()})
		}
	}
	return swaps, out, nil
}

// closePlanned closes the new pools of swaps, which were never started
// (a reload that failed).
func closePlanned(swaps []poolSwap) {
	for _, sw := range swaps {
		if sw.next != nil {
			_ = sw.next.Close(context.Background())
		}
	}
}

// startSwaps starts the new pools of swaps; once their binds are up (or
// after upstreamSwapWait) routes move to them, and then the pools they
// replace, and those of removed upstreams, drain their in-flight submits
// and close — in the background, so Reload does not wait for it.
func (a *App) startSwaps(swaps []poolSwap) {
	if len(swaps) == 0 {
		return
	}
	a.mu.Lock()
	for _, sw := range swaps {
		if sw.next != nil {
			// In the list at once, so that a shutdown closes it too.
			a.pools = append(a.pools, sw.next)
		}
	}
	a.mu.Unlock()
	for _, sw := range swaps {
		if sw.next != nil {
			a.instr.upstreams.Add(sw.next)
			a.Sessions.Add(poolSource{sw.next})
			sw.next.Start()
		}
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		a.completeSwaps(swaps)
	}()
}

// completeSwaps waits for the new pools' binds (bounded), moves the
// routes to them and closes the pools they replace.
func (a *App) completeSwaps(swaps []poolSwap) {
	deadline := time.NewTimer(upstreamSwapWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for _, sw := range swaps {
		for sw.next != nil && sw.next.Up() == 0 {
			select {
			case <-a.stopBG:
				return // shutting down: Shutdown closes every pool
			case <-deadline.C:
				a.log.Warn("upstream reloaded: new binds not up yet; routes use them anyway", "upstream", sw.name, "waited", upstreamSwapWait)
				break wait
			case <-tick.C:
			}
		}
	}
	a.mu.Lock()
	for _, sw := range swaps {
		if sw.next != nil {
			a.byName[sw.name] = sw.next
		} else {
			delete(a.byName, sw.name)
		}
	}
	a.mu.Unlock()
	cfg := a.config()
	a.instr.router.SetRoutes(a.routes(a.poolsByName()))
	for _, sw := range swaps {
		if sw.prev == nil {
			continue
		}
		// In-flight submits finish first: the pool's own response timeout
		// ends each in time (so a submit its SMSC answers late is never cut
		// off into unknown), and the shutdown budget when longer.
		ctx, cancel := context.WithTimeout(context.Background(), max(cfg.ShutdownTimeout.Std(), sw.drain)+time.Second)
		go func() {
			// A shutdown closes every pool within its own budget: this
			// drain does not hold it.
			select {
			case <-a.stopBG:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = sw.prev.Close(ctx)
		cancel()
		a.instr.upstreams.Remove(sw.prev)
		a.Sessions.Remove(poolSource{sw.prev})
		a.mu.Lock()
		a.pools = slices.DeleteFunc(a.pools, func(p *smppclient.Pool) bool { return p == sw.prev })
		a.mu.Unlock()
		a.log.Info("upstream reloaded: the old binds drained and closed", "upstream", sw.name)
	}
	// The old binds are gone: a shorter response_timeout now holds for
	// kept receipts too.
	a.receipts.SetUpstreams(receiptUpstreams(cfg, a.receipts.Upstreams(), false))
}

// connectionChanges names the settings of an upstream that its pool holds
// (all but routing weights and retries, id formats and echo_tlv, which
// apply without new binds).
func connectionChanges(prev, next config.Upstream) []string {
	clear := func(u config.Upstream) config.Upstream {
		u.Weight, u.ForwardKeyTLV, u.Retry = 0, false, config.Retry{}
		u.RespIDFormat, u.ReceiptIDFormat, u.EchoTLV = "", "", 0
		return u
	}
	return diffFields(clear(prev), clear(next))
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
		if prev := old.Upstream(u.Name); prev != nil && prev.EchoTLV != u.EchoTLV {
			out = append(out, "upstream "+u.Name+": echo_tlv")
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
