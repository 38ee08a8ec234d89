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
// flagReplayEnd and no records). catchUp tracks those markers so that the
// cluster node can hold the director back until the state has arrived
// (cluster.SyncCatchUp): with a million connections a replay takes seconds.

// catchUp is which directors heard since this relay started have not yet
// finished replaying their cache to it. It is safe for concurrent use.
type catchUp struct {
	mu       sync.Mutex
	started  time.Time
	limit    time.Duration
	awaiting map[string]bool
	done     bool
	log      *slog.Logger
}

func newCatchUp(started time.Time, limit time.Duration, log *slog.Logger) *catchUp {
	return &catchUp{started: started, limit: limit, awaiting: map[string]bool{}, log: log}
}

// joined: name was heard; until done, its replay is awaited.
func (c *catchUp) joined(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.awaiting[name] = true
	}
}

// gone: name left or its replay ended; it is no longer awaited.
func (c *catchUp) gone(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.awaiting, name)
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
		c.log.Warn("the other directors' connection state did not all arrive in time; serving without it (their flows may break here)",
			"missing", slices.Sorted(maps.Keys(c.awaiting)), "limit", c.limit.String())
	default:
		return false
	}
	c.done, c.awaiting = true, nil
	return true
}
