package dedup

import (
	"context"
	"errors"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
)

// PolicyFunc returns the idempotency policy of a bound principal.
type PolicyFunc func(p *smppserver.Principal) Policy

// Middleware returns the link of the request chain that handles submit_sm
// through e; every other request goes to next.
func (e *Engine) Middleware(policy PolicyFunc) smppserver.Middleware {
	return func(next smppserver.Handler) smppserver.Handler {
		return smppserver.HandlerFunc(func(ctx context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
			if r.Header.ID != smpp.CmdSubmitSM {
				next.ServeSMPP(ctx, w, r)
				return
			}
			sub, err := smpp.ParseSubmit(r.Frame)
			if err != nil {
				st := smpp.StatusSysErr
				var fe *smpp.FieldError
				if errors.As(err, &fe) {
					st = fe.Status
				}
				e.log.Debug("malformed submit_sm", "session", r.Session.ID(), "sequence", r.Header.Sequence, "err", err.Error())
				_ = w.WriteStatus(st)
				return
			}
			p := r.Session.Principal()
			a := e.Submit(WithSession(ctx, r.Session.ID()), p.Account, policy(p), sub)
			_ = w.WriteFrame(smpp.SubmitResp(a.Status, r.Header.Sequence, a.MessageID))
		})
	}
}
