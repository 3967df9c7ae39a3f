package state

import "time"

// gatherer decides when the committer hands its next batch over, with a
// commit delay (BadgerOptions.CommitDelay). Without one a batch goes as
// soon as the one before it is durable, however few writes it holds: at a
// modest rate most group commits carry one to three writes, and each
// costs a write, an fdatasync and the hand-overs around them whatever it
// carries. With one, a batch waits for the writes expected within the
// delay, judged by the recent time between arrivals, and goes once it
// holds them or once it has waited the delay. A writer alone, or arrivals
// too sparse to bring two more within the delay, is never held, and a
// full batch never waits. Nor is a batch held while the recent batches
// carried fewer than two writes on average: writes that come one at a
// time, each after the one before it is durable (a client that sends one
// submit and waits for its answer), arrive at the pace of the commits
// however few their writers, and holding them would only delay them. Nor
// while they carried gatherFull or more (see there).
type gatherer struct {
	delay   time.Duration
	now     func() time.Time
	last    time.Time     // the latest arrival
	gap     time.Duration // moving average of the time between arrivals
	batches float64       // moving average of the writes per batch
	timer   *time.Timer
	armed   bool   // the timer runs for the open batch
	fired   bool   // the open batch has waited the delay
	onHold  func() // tests: a batch is held
}

const (
	// gatherMost is the most writes a batch waits for.
	gatherMost = 64
	// gatherFull: no batch is held while the recent batches carried this
	// many writes or more on average: the commits are full enough, and
	// (a saturated store) holding would only slow every writer down.
	gatherFull = 16
	// gatherWeight: each arrival moves the average gap by 1/gatherWeight
	// of its difference from it; batchWeight: each batch the average
	// batch by 1/batchWeight of its.
	gatherWeight = 16
	batchWeight  = 8
)

func newGatherer(delay time.Duration, now func() time.Time) *gatherer {
	return &gatherer{delay: delay, now: now, gap: delay, batches: 1}
}

// arrived notes a write's arrival.
func (g *gatherer) arrived() {
	if g.delay <= 0 {
		return
	}
	t := g.now()
	if !g.last.IsZero() {
		g.gap += (t.Sub(g.last) - g.gap) / gatherWeight
	}
	g.last = t
}

// expected is how many writes are expected to arrive within the delay.
func (g *gatherer) expected() int {
	if g.gap <= 0 {
		return gatherMost
	}
	return int(min(g.delay/g.gap, gatherMost))
}

// ready reports whether a batch of n writes goes now (full: it takes no
// more); when it does, the caller hands it over. When it does not, the
// delay's timer runs (see wait).
func (g *gatherer) ready(n int, full bool) bool {
	if g.delay <= 0 {
		return true
	}
	if e := g.expected(); g.fired || full || e < 2 || n >= e || g.batches < 2 || g.batches >= gatherFull {
		g.reset()
		g.batches += (float64(n) - g.batches) / batchWeight
		return true
	}
	if !g.armed {
		if g.onHold != nil {
			g.onHold()
		}
		if g.timer == nil {
			g.timer = time.NewTimer(g.delay)
		} else {
			g.timer.Reset(g.delay)
		}
		g.armed = true
	}
	return false
}

// wait is the delay's timer while the open batch waits (nil otherwise:
// a receive from it blocks).
func (g *gatherer) wait() <-chan time.Time {
	if !g.armed {
		return nil
	}
	return g.timer.C
}

// expired notes that the open batch has waited the delay.
func (g *gatherer) expired() { g.armed, g.fired = false, true }

// reset forgets the open batch's wait (it goes).
func (g *gatherer) reset() {
	if g.armed {
		g.timer.Stop()
	}
	g.armed, g.fired = false, false
}

// stop releases the timer.
func (g *gatherer) stop() {
	if g.timer != nil {
		g.timer.Stop()
	}
}
