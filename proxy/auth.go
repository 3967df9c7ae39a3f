package proxy

import (
	"context"
	"crypto/subtle"
	"net"
	"net/netip"

	"golang.org/x/crypto/bcrypt"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
)

// accountAuth authenticates ESME binds against the configured accounts:
// password (constant-time) or bcrypt hash, allowed networks. max_binds is
// enforced by the server from the Principal.
type accountAuth struct {
	accounts map[string]*config.Account
	app      *App
}

func newAccountAuth(app *App, accts []config.Account) *accountAuth {
	a := &accountAuth{accounts: map[string]*config.Account{}, app: app}
	for i := range accts {
		a.accounts[accts[i].SystemID] = &accts[i]
	}
	return a
}

func (a *accountAuth) Authenticate(_ context.Context, r smppserver.BindRequest) (*smppserver.Principal, smpp.Status) {
	log := a.app.log.With("system_id", r.SystemID, "remote", r.Remote.String(), "bind", r.Type.String())
	acc, ok := a.accounts[r.SystemID]
	if !ok {
		// Compare against a dummy hash anyway so timing does not reveal
		// which system_ids exist.
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(r.Password))
		log.Warn("bind refused: unknown system_id")
		return nil, smpp.StatusBindFail
	}
	if !acc.Allows(remoteIP(r.Remote)) {
		log.Warn("bind refused: address not in allowed_networks")
		return nil, smpp.StatusBindFail
	}
	if acc.PasswordHash != "" {
		if bcrypt.CompareHashAndPassword([]byte(acc.PasswordHash), []byte(r.Password)) != nil {
			log.Warn("bind refused: wrong password")
			return nil, smpp.StatusBindFail
		}
	} else if subtle.ConstantTimeCompare([]byte(acc.Password), []byte(r.Password)) != 1 {
		log.Warn("bind refused: wrong password")
		return nil, smpp.StatusBindFail
	}
	return &smppserver.Principal{Account: acc.SystemID, MaxBinds: acc.MaxBinds, Window: acc.Window, Value: acc}, smpp.StatusOK
}

var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("dummy-password"), bcrypt.MinCost)

func remoteIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
