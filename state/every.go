package state

import (
	"sync"
	"time"
)

// every runs fn every d on a goroutine of its own until fn reports false
// or the returned stop is called (stop waits for it to end; a second call
// does nothing).
func every(d time.Duration, fn func() bool) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if !fn() {
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
