// Package route sends an owned submit to an upstream: it picks an upstream
// of the account's route by weight among the healthy ones (weight 0 =
// backup, used only while every weighted upstream is down), keeps all
// segments of one concatenated message on one upstream, and adapts
// smppclient's outcomes to the dedup engine's (answered, not sent,
// ambiguous).
package route

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// Upstream is the part of an smppclient.Pool the router needs.
type Upstream interface {
	Name() string
	Up() int
	Submit(ctx context.Context, prefer string, build func(seq uint32) []byte, beforeWrite func(session string, seq uint32) error) (smppclient.Response, error)
}

// Member is one upstream of a route.
type Member struct {
	Upstream Upstream
	// Weight is its share of the traffic; 0 marks a backup.
	Weight int
	// ForwardKeyTLV keeps the idempotency key TLV on submits sent to it.
	ForwardKeyTLV bool
}

// Router implements dedup.Forwarder over per-account routes.
type Router struct {
	routes map[string][]Member
}

var _ dedup.Forwarder = (*Router)(nil)

// New returns a Router; routes maps account → its members in order.
func New(routes map[string][]Member) *Router { return &Router{routes: routes} }

// Pick chooses the member for an attempt. segKey identifies the message a
// segment belongs to; all segments with one segKey get the same member
// while the set of healthy members does not change.
func (r *Router) Pick(account string, seg smpp.Segment, segKey string) (Member, bool) {
	ms := r.routes[account]
	if len(ms) == 0 {
		return Member{}, false
	}
	var pool []Member
	total := 0
	for _, m := range ms {
		if m.Weight > 0 && m.Upstream.Up() > 0 {
			pool = append(pool, m)
			total += m.Weight
		}
	}
	if len(pool) == 0 {
		for _, m := range ms {
			if m.Weight == 0 && m.Upstream.Up() > 0 {
				pool = append(pool, m)
				total++
			}
		}
	}
	if len(pool) == 0 {
		// Nothing is up: take the first member and let it wait route_wait.
		return ms[0], true
	}
	var n int
	if seg.Total > 0 {
		h := fnv.New32a()
		h.Write([]byte(segKey))
		n = int(h.Sum32() % uint32(total))
	} else {
		n = rand.IntN(total)
	}
	for _, m := range pool {
		w := max(m.Weight, 1)
		if n < w {
			return m, true
		}
		n -= w
	}
	return pool[len(pool)-1], true
}

// Forward sends the attempt and classifies the outcome.
func (r *Router) Forward(ctx context.Context, a *dedup.Attempt) dedup.Result {
	segKey := a.Account + "\x00" + string(a.Submit.SrcAddr) + "\x00" + string(a.Submit.DstAddr)
	m, ok := r.Pick(a.Account, a.Segment, segKey)
	if !ok {
		return dedup.Result{Kind: dedup.NotSent, Status: smpp.StatusSysErr, Err: errors.New("route: account has no route")}
	}
	name := m.Upstream.Name()
	var drop []uint16
	if a.KeyTag != 0 && !m.ForwardKeyTLV {
		drop = []uint16{a.KeyTag}
	}
	resp, err := m.Upstream.Submit(ctx, "",
		func(seq uint32) []byte { return a.Submit.Frame(seq, drop...) },
		func(session string, seq uint32) error { return a.Journal(name, session, seq) })
	res := dedup.Result{Upstream: name, Session: resp.Session, Sequence: resp.Sequence, Err: err}
	switch {
	case err == nil:
		res.Kind, res.Status, res.MessageID = dedup.Answered, resp.Status, resp.MessageID
	case errors.Is(err, smppclient.ErrNotSent):
		res.Kind, res.Status = dedup.NotSent, smpp.StatusSysErr
		if errors.Is(err, smppclient.ErrBusy) {
			res.Status = smpp.StatusThrottled
		}
	default:
		// Timeout, session lost, or anything we cannot classify: the PDU
		// may have reached the SMSC, so the outcome is ambiguous.
		res.Kind = dedup.Ambiguous
	}
	return res
}
