package dedup

import "sync/atomic"

// haveRecord estimates, for Config.CreateFirst, the share of keys the
// engine does not remember whose store record exists: an exponentially
// weighted mean (weight 1/16) of the submits that had to find out, by a
// read or by a create, scaled to 1<<16.
//
// A create that finds the key's record costs more than the read that
// would have found it (on PostgreSQL, proxy plus database CPU per retry
// ~64 µs against ~35 µs), and a read of a fresh key costs about what
// creating first saves (~12 µs of proxy CPU plus the database's). So the
// engine creates first while most unremembered keys are fresh, the usual
// traffic, and reads first while most have records: a client resending
// through this instance what another instance settled, a backlog retried
// after an outage. Which one it does changes only what a submit costs,
// never its answer. Untracked submits (a unique key of their own) are
// neither read first nor counted.
type haveRecord struct{ v atomic.Uint32 }

const (
	haveRecordOne   = 1 << 16
	haveRecordShift = 4 // weight 1/16: ~11 submits of the other kind move it past half
)

// observe adds one submit whose unremembered key had a record (had) or
// not.
func (h *haveRecord) observe(had bool) {
	target := uint32(0)
	if had {
		target = haveRecordOne
	}
	for {
		old := h.v.Load()
		next := old - old>>haveRecordShift + target>>haveRecordShift
		if h.v.CompareAndSwap(old, next) {
			return
		}
	}
}

// readFirst reports whether most unremembered keys had a record lately.
func (h *haveRecord) readFirst() bool { return h.v.Load() > haveRecordOne/2 }
