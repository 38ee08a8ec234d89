package health

import (
	"container/heap"
	"context"
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Scheduling. One goroutine, the Monitor's scheduler, keeps every target's
// next round in a heap and starts the rounds that are due; a round runs on a
// goroutine of its own that ends with it. So an idle target costs its runner
// and a heap entry, not a goroutine with its stack and a timer each: at
// 100,000 targets, hundreds of megabytes less, and a garbage collector that
// scans a few goroutines' stacks instead of 100,000.
//
// Checks in flight are bounded (WithMaxInFlight): a round takes a slot per
// check before it starts and gives them back when it ends. When none is
// free the scheduler waits, so the rounds due meanwhile start late, in the
// order they were due, instead of failing; their later rounds keep their
// phase (nextSlot). The bound keeps the sockets of checks under the file
// descriptor limit, and the goroutines competing with the rest of the
// process for the CPU to a number that does not starve it when the host
// cannot keep up with what the checks ask.

// DefaultMaxInFlight is the default bound on checks in flight. A check
// answered in a millisecond lets it run 1,000,000 checks a second; one that
// times out after a second, 1,000 a second.
const DefaultMaxInFlight = 1024

// WithMaxInFlight bounds the checks in flight at once (at least 1);
// 0 keeps the default (DefaultMaxInFlight, or a quarter of the soft
// RLIMIT_NOFILE when that is less).
func WithMaxInFlight(n int) Option {
	return func(m *Monitor) {
		if n > 0 {
			m.maxInFlight = n
		}
	}
}

// defaultMaxInFlight is DefaultMaxInFlight within a quarter of the file
// descriptor limit: the rest are the process's own (netlink, the API, the
// cluster), which a crowd of checks must never take.
func defaultMaxInFlight() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return DefaultMaxInFlight
	}
	return int(max(1, min(DefaultMaxInFlight, lim.Cur/4)))
}

// Stats are the Monitor's figures of scheduling.
type Stats struct {
	Targets     int
	InFlight    int    // checks running now
	MaxInFlight int    // the bound on InFlight
	Delayed     uint64 // rounds that waited for a slot, since the start
	// NotCounted are the rounds whose checks could not run on this host
	// (Result.Local), since the start.
	NotCounted uint64
}

// Stats returns the Monitor's figures of scheduling.
func (m *Monitor) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{Targets: len(m.runners), InFlight: len(m.slots), MaxInFlight: cap(m.slots), Delayed: m.delayed,
		NotCounted: m.local}
}

// delayLogEvery bounds the log of delayed rounds to a line a minute.
const delayLogEvery = time.Minute

// due is a round to start at, from the Monitor's epoch: 16 bytes a
// target, where a time.Time would take 32.
type due struct {
	at time.Duration
	r  *runner
}

// queue is a min-heap of rounds by time.
type queue []due

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q queue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)        { *q = append(*q, x.(due)) }
func (q *queue) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = due{}
	*q = old[:len(old)-1]
	return d
}

// enqueue puts r's next round, at at, in the queue and wakes the
// scheduler if it sleeps past it; m.mu must be held. The queue alone keeps
// the time of a target's next round, which the round then takes on (run).
func (m *Monitor) enqueue(r *runner, at time.Duration) {
	heap.Push(&m.queue, due{at, r})
	if m.sleepUntil.IsZero() || m.at(at).Before(m.sleepUntil) {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// first schedules r's first round: a random offset into its interval from
// now, on the slot grid; m.mu must be held and Run started.
func (m *Monitor) first(r *runner) {
	interval := r.spec.interval
	m.enqueue(r, m.align(m.clock.Now().Add(m.jitter(interval)), interval).Sub(m.epoch))
}

// at is the time of offset from the epoch.
func (m *Monitor) at(offset time.Duration) time.Time { return m.epoch.Add(offset) }

// schedule starts the rounds as they come due until ctx ends.
func (m *Monitor) schedule(ctx context.Context) {
	var batch []due
	for {
		m.mu.Lock()
		now := m.clock.Now()
		batch = batch[:0]
		for len(m.queue) > 0 && !m.at(m.queue[0].at).After(now) {
			if d := heap.Pop(&m.queue).(due); !d.r.stopped {
				batch = append(batch, d)
			}
		}
		wait := time.Duration(-1)
		m.sleepUntil = time.Time{}
		if len(m.queue) > 0 {
			m.sleepUntil = m.at(m.queue[0].at)
			wait = m.sleepUntil.Sub(now)
		}
		m.mu.Unlock()
		if len(batch) > 0 {
			for _, d := range batch {
				if !m.dispatch(ctx, d) {
					return
				}
			}
			clear(batch) // no runner kept alive by the scheduler
			continue     // time went on while they started
		}
		var timer <-chan time.Time
		if wait >= 0 {
			timer = m.clock.After(wait)
		}
		m.mu.Lock()
		m.sleeping = true
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-timer:
		}
		m.mu.Lock()
		m.sleeping = false
		m.mu.Unlock()
	}
}

// dispatch takes the slots of d's runner, waiting for them when the bound
// is reached, and starts its round. It returns false when ctx ended first.
func (m *Monitor) dispatch(ctx context.Context, d due) bool {
	r := d.r
	n := min(len(r.spec.checks), cap(m.slots))
	for i := range n {
		select {
		case m.slots <- struct{}{}:
			continue
		default:
		}
		if i == 0 {
			m.noteDelayed()
		}
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			m.release(i)
			return false
		}
	}
	m.mu.Lock()
	if r.stopped {
		m.mu.Unlock()
		m.release(n)
		return true
	}
	rctx, cancel := context.WithCancel(ctx)
	m.cancels[r], r.running = cancel, true
	m.wg.Add(1)
	m.mu.Unlock()
	go m.run(rctx, cancel, r, n, d.at)
	return true
}

func (m *Monitor) release(n int) {
	for range n {
		<-m.slots
	}
}

// noteDelayed counts a round that waits for a slot, and logs it at most
// once per delayLogEvery.
func (m *Monitor) noteDelayed() {
	m.mu.Lock()
	m.delayed++
	now := m.clock.Now()
	logIt := m.delayLogged.IsZero() || now.Sub(m.delayLogged) >= delayLogEvery
	var delayed uint64
	if logIt {
		delayed = m.delayed - m.delayedLogged
		m.delayLogged, m.delayedLogged = now, m.delayed
	}
	targets := len(m.runners)
	m.mu.Unlock()
	if logIt {
		m.log.Warn("health checks delayed: as many in flight as allowed", "event", "health_delayed",
			"max_in_flight", cap(m.slots), "delayed_rounds", delayed, "targets", targets,
			"hint", "checks ask more than this host answers in time: longer intervals, shorter timeouts, or a larger max_in_flight")
	}
}

// run runs one round of r holding slots slots, records it, and queues
// r's next round unless r or the Monitor stopped meanwhile.
func (m *Monitor) run(ctx context.Context, cancel context.CancelFunc, r *runner, slots int, at time.Duration) {
	defer m.wg.Done()
	start := m.clock.Now()
	results := r.round(ctx)
	m.release(slots)
	aborted := ctx.Err() != nil // stopped: the verdict of an aborted round means nothing
	cancel()
	if !aborted {
		r.record(results, m.clock.Now().Sub(start))
	}
	m.mu.Lock()
	r.running = false
	delete(m.cancels, r)
	closeIt := r.stopped
	if !r.stopped && !m.stopped {
		interval := r.spec.interval
		m.enqueue(r, m.align(nextSlot(m.at(at), interval, m.clock.Now()), interval).Sub(m.epoch))
	}
	m.finished++
	m.mu.Unlock()
	if closeIt {
		r.close() // stopped while its round ran: the round's goroutine is the checkers' last user
	}
}

// localFailure reports whether err says the check could not run on this
// host at all (no file descriptor or buffer left), which says nothing of
// the target.
func localFailure(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// noteLocal counts a round that could not run its checks on this host
// and logs it at most once per delayLogEvery: its verdict is not counted,
// so a host out of file descriptors takes no backend out.
func (m *Monitor) noteLocal(key, reason string) {
	m.mu.Lock()
	m.local++
	now := m.clock.Now()
	logIt := m.localLogged.IsZero() || now.Sub(m.localLogged) >= delayLogEvery
	if logIt {
		m.localLogged = now
	}
	total := m.local
	m.mu.Unlock()
	if logIt {
		m.log.Error("health check could not run on this host; its round is not counted", "event", "health_local",
			"target", key, "reason", reason, "rounds_not_counted", total)
	}
}
