package connsync

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// A director that starts (or joins an ECMP group) receives flows the others
// started as soon as it owns a VIP or announces one; it can continue them
// only with their connection entries. Every director that hears it replays
// its cache to it and then sends an end marker (a message with
// flagReplayEnd and no records). catchUp tracks those markers, and with a
// Config.Kernel the kernel's confirmation that the records are in its
// table (confirm.go), so that the cluster node can hold the director back
// until the state is here (cluster.SyncCatchUp): with a million
// connections a replay takes seconds.

// catchUp is which directors heard since this relay started have not yet
// finished replaying their cache to it. It is safe for concurrent use.
type catchUp struct {
	mu       sync.Mutex
	started  time.Time
	limit    time.Duration
	awaiting map[string]bool
	// replayed are the directors whose end marker came, possibly before
	// this one counted them: a director counts a newcomer as soon as the
	// newcomer's heartbeat echoes it, which may be before its own next
	// heartbeat reaches the newcomer.
	replayed map[string]bool
	// confirming are the awaited directors whose end marker came and whose
	// records the kernel's table is being checked for.
	confirming map[string]bool
	done       bool
	log        *slog.Logger
}

func newCatchUp(started time.Time, limit time.Duration, log *slog.Logger) *catchUp {
	return &catchUp{started: started, limit: limit, awaiting: map[string]bool{}, replayed: map[string]bool{},
		confirming: map[string]bool{}, log: log}
}

// joined: name was heard; until done, its replay is awaited unless it has
// already ended.
func (c *catchUp) joined(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done && !c.replayed[name] {
		c.awaiting[name] = true
	}
}

// left: name left; it is no longer awaited.
func (c *catchUp) left(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.awaiting, name)
	delete(c.confirming, name)
}

// markerCame: name's end marker came; its records are being confirmed.
func (c *catchUp) markerCame(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.awaiting[name] {
		c.confirming[name] = true
	}
}

// over reports whether the catch-up waits for nothing any more.
func (c *catchUp) over() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// ended: name's state is here: its end marker came and, with a kernel to
// check, its records are in the kernel's table.
func (c *catchUp) ended(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.awaiting, name)
	delete(c.confirming, name)
	if !c.done {
		c.replayed[name] = true
	}
}

// caughtUp reports whether every director heard so far has replayed its
// cache, or limit has passed since the start. Once true it stays true: it
// gates the start only, not each later join.
func (c *catchUp) caughtUp(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.done:
		return true
	case len(c.awaiting) == 0:
		c.log.Info("connection state of the other directors received", "after", now.Sub(c.started).Round(time.Millisecond).String())
	case now.Sub(c.started) >= c.limit:
		var missing []string
		for name := range c.awaiting {
			if !c.confirming[name] {
				missing = append(missing, name)
			}
		}
		slices.Sort(missing)
		c.log.Warn("the other directors' connection state did not all arrive in time; serving without it (their flows may break here)",
			"missing", missing, "unconfirmed_in_kernel", slices.Sorted(maps.Keys(c.confirming)), "limit", c.limit.String())
	default:
		return false
	}
	c.done, c.awaiting, c.replayed, c.confirming = true, nil, nil, nil
	return true
}
