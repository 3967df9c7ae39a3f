package testkit

import "sync"

// Gate holds the goroutines that Pass it while a test holds it: a fake
// connection's Write, say, so that a test sees what piles up behind a
// blocked write. The zero Gate is open. Safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	gate    chan struct{} // not nil: Pass waits until it is closed
	entered chan struct{} // told (without blocking) when a Pass waits
}

// Hold makes the next Pass calls wait until release is called; entered is
// told when one is waiting.
func (g *Gate) Hold() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate, ent := make(chan struct{}), make(chan struct{}, 1)
	g.gate, g.entered = gate, ent
	return ent, func() {
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(gate)
	}
}

// Pass returns at once unless the gate is held; then it tells entered and
// waits for the release.
func (g *Gate) Pass() {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.mu.Unlock()
	if gate == nil {
		return
	}
	select {
	case entered <- struct{}{}:
	default:
	}
	<-gate
}
