//go:build e2e

package e2e

import (
	"sync"
	"time"
)

// probeLoop is what the e2e probers share: at every tick of a period it
// runs one probe in a goroutine of its own (as a stream of clients would),
// until close. They differ only in what a probe does and records.
type probeLoop struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func newProbeLoop() probeLoop { return probeLoop{stop: make(chan struct{})} }

// every starts the ticks; each runs probe.
func (l *probeLoop) every(period time.Duration, probe func()) {
	l.wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Go(probe)
		}
	})
}

// close stops the ticks and waits for the probes under way (idempotent).
func (l *probeLoop) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}
