package main

import (
	"sync"
	"time"
)

// rssSampleEvery is how often an rssSampler reads the proxy's memory.
const rssSampleEvery = 100 * time.Millisecond

// rssSampler keeps the peaks of the two parts of one process's RSS, read
// from /proc/PID/status every rssSampleEvery: RssAnon (the Go heap and
// the runtime's other memory) and RssFile (file-backed pages: the
// executable, the store's memtable logs and the pages of its mapped
// tables touched since it last released them). VmHWM is only their sum's
// peak, which cannot tell them apart. A peak between two readings is
// missed: these are samples.
type rssSampler struct {
	pid      int
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	mu         sync.Mutex
	anon, file int64 // kB
}

// startRSSSampler starts sampling pid until stopPeaks.
func startRSSSampler(pid int) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	a, f := procStatusKB(s.pid, "RssAnon"), procStatusKB(s.pid, "RssFile")
	s.mu.Lock()
	s.anon, s.file = max(s.anon, a), max(s.file, f)
	s.mu.Unlock()
}

// stopPeaks stops the sampler (again: no more), takes a last reading and
// returns the peaks in kB (0 where /proc could not be read). A nil
// sampler has none.
func (s *rssSampler) stopPeaks() (anonKB, fileKB int64) {
	if s == nil {
		return 0, 0
	}
	s.stopOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anon, s.file
}
