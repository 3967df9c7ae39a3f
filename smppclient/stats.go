package smppclient

import "sync/atomic"

// Stats is a snapshot of a pool's counters since New; every counter only
// grows, so each maps onto a Prometheus counter.
type Stats struct {
	Binds          uint64 // successful binds
	BindFailures   uint64 // failed dial, TLS or bind attempts
	Written        uint64 // requests written by Submit
	Responses      uint64 // responses matched to a pending request
	Throttled      uint64 // of which ESME_RTHROTTLED
	Timeouts       uint64 // Submit calls ended with ErrTimeout
	SessionLost    uint64 // Submit calls ended with ErrSessionLost
	NoSession      uint64 // Submit calls ended with ErrNotSent/ErrNoSession
	Busy           uint64 // Submit calls ended with ErrNotSent/ErrBusy
	NotSentOther   uint64 // other ErrNotSent outcomes (beforeWrite, context, write)
	LateResponses  uint64 // responses with no pending request
	BadAnswers     uint64 // Submit calls ended with ErrBadAnswer (an overlong message id) or ErrUnclearAnswer (a generic_nack that may not answer it)
	Deliveries     uint64 // deliver_sm/data_sm handed to OnDeliver
	DeliverRefused uint64 // deliver_sm/data_sm answered 0x58: DeliverWindow full
	DeliverPanics  uint64 // OnDeliver panics recovered
	EnquireLinks   uint64 // enquire_link sent
	// Closed counts closed sessions by reason.
	Closed map[CloseReason]uint64
}

type counters struct {
	binds, bindFailures, written, responses, throttled, timeouts atomic.Uint64
	sessionLost, noSession, busy, notSentOther, lateResponses    atomic.Uint64
	badAnswers                                                   atomic.Uint64
	deliveries, deliverRefused, deliverPanics, enquireLinks      atomic.Uint64
	closed                                                       [reasonCount]atomic.Uint64
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	c := &p.stats
	s := Stats{
		Binds: c.binds.Load(), BindFailures: c.bindFailures.Load(),
		Written: c.written.Load(), Responses: c.responses.Load(), Throttled: c.throttled.Load(),
		Timeouts: c.timeouts.Load(), SessionLost: c.sessionLost.Load(),
		NoSession: c.noSession.Load(), Busy: c.busy.Load(), NotSentOther: c.notSentOther.Load(),
		LateResponses: c.lateResponses.Load(), Deliveries: c.deliveries.Load(),
		DeliverRefused: c.deliverRefused.Load(), DeliverPanics: c.deliverPanics.Load(),
		EnquireLinks: c.enquireLinks.Load(), BadAnswers: c.badAnswers.Load(),
		Closed: make(map[CloseReason]uint64),
	}
	for r := range c.closed {
		if n := c.closed[r].Load(); n > 0 {
			s.Closed[CloseReason(r)] = n
		}
	}
	return s
}

// add adds o's counters to s.
func (s *Stats) add(o Stats) {
	s.Binds += o.Binds
	s.BindFailures += o.BindFailures
	s.Written += o.Written
	s.Responses += o.Responses
	s.Throttled += o.Throttled
	s.Timeouts += o.Timeouts
	s.SessionLost += o.SessionLost
	s.NoSession += o.NoSession
	s.Busy += o.Busy
	s.NotSentOther += o.NotSentOther
	s.LateResponses += o.LateResponses
	s.BadAnswers += o.BadAnswers
	s.Deliveries += o.Deliveries
	s.DeliverRefused += o.DeliverRefused
	s.DeliverPanics += o.DeliverPanics
	s.EnquireLinks += o.EnquireLinks
	if len(o.Closed) > 0 && s.Closed == nil {
		s.Closed = map[CloseReason]uint64{}
	}
	for r, n := range o.Closed {
		s.Closed[r] += n
	}
}
