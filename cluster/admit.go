package cluster

import (
	"log/slog"
	"sync"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// maxIncarnationSkew is how far in the future, by the receiver's clock, a
// sender's incarnation may be. Incarnations are the clock in nanoseconds
// at start, or one more than the last one when the clock went back
// (agent/director/incarnation.go), so a real one is never far ahead. A
// heartbeat of a far-future incarnation would be the newest ever heard from
// its name: every real heartbeat after it would be refused as old
// (freshness.go), so it is refused, with identities or without.
const maxIncarnationSkew = 24 * time.Hour

// refusedFuture is the refusal of a far-future incarnation.
const refusedFuture = "future incarnation"

// admit decides whether a decoded heartbeat may be used at all, before the
// freshness guard sees it: its incarnation is not far in the future, and
// when cluster.directors is configured, it is v4 and signed by a key listed
// under its name. A refusal is counted and logged.
func (n *Node) admit(hb heartbeat, now time.Time) bool {
	if limit := uint64(now.Add(maxIncarnationSkew).UnixNano()); hb.Incarnation > limit {
		n.refused.note(n.log, refusedFuture, hb.Name, now, "refused a heartbeat of an incarnation far in the future: it would make the sender's real heartbeats look old",
			"peer", hb.Name, "address", hb.Addr, "incarnation", hb.Incarnation, "limit", limit)
		return false
	}
	keys := n.cfg.Identity
	if !keys.Enforced() {
		return true
	}
	err := keys.Verify(hb.Name, hb.signed, hb.sig)
	if err == nil && hb.Version < 4 {
		err = identity.Unsigned // v3 has no signature: verify saw the name only
	}
	if err == nil {
		return true
	}
	kind := err.(identity.Refusal)
	n.refused.note(n.log, string(kind), hb.Name, now, "refused a heartbeat that does not prove its sender (cluster.directors)",
		"peer", hb.Name, "address", hb.Addr, "why", string(kind), "version", hb.Version)
	return false
}

// refusals counts the heartbeats refused by admit, by reason, and logs the
// first of each reason and sender, then at most once an hour (as the relay
// logs its refusals): a forger must not fill the log. It is used from
// memberlist's packet goroutine and read by the view.
type refusals struct {
	mu     sync.Mutex
	counts map[string]uint64
	logged map[string]time.Time
}

// refusalLogEvery is how often one kind of refusal from one sender is
// logged again.
const refusalLogEvery = time.Hour

func (r *refusals) note(log *slog.Logger, kind, sender string, now time.Time, msg string, args ...any) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts, r.logged = map[string]uint64{}, map[string]time.Time{}
	}
	r.counts[kind]++
	key := kind + "\x00" + sender
	last, seen := r.logged[key]
	quiet := seen && now.Sub(last) < refusalLogEvery
	if !quiet {
		if len(r.logged) >= 1024 {
			clear(r.logged)
		}
		r.logged[key] = now
	}
	r.mu.Unlock()
	if !quiet {
		log.Warn(msg, args...)
	}
}

// snapshot returns the counts by reason; nil when nothing was refused.
func (r *refusals) snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}
