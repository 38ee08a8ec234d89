package cluster

import (
	"maps"
	"slices"
	"time"
)

// heartbeatGuard decides which heartbeats may count. memberlist
// authenticates every heartbeat with the cluster key but does not stop
// anyone on the path from sending a captured one again: replaying a dead
// director's heartbeats would keep it live and block the failover.
//
//   - A heartbeat counts only if its (incarnation, seq) is newer than the
//     last one used from that director. The other parts of a heartbeat
//     share its seq: they complete its claims but do not refresh liveness.
//     memberlist hands queued messages over newest first, so an older
//     heartbeat that arrives late is dropped like a replay; the newer one
//     has said more already.
//   - A director this one has no memory of (first heard, or restarted) must
//     prove its heartbeat was sent after this process started: it must echo
//     this process's incarnation (heartbeat.Heard), which it learns from
//     this director's own heartbeats within one interval. No clock is
//     involved, so a director whose clock is off or was stepped is still
//     heard (docs/cluster.md, threat model).
//   - A restart is a new incarnation, normally a higher one (the director
//     keeps a counter in its state directory). A lower one, never used
//     from that name, counts once the incarnation used last has been silent
//     for the failure timeout: by then this director has declared the old
//     process failed, so taking the new one takes nothing from a live
//     director. Without this rule a director that restarted with an
//     earlier incarnation (its clock went back and its counter was lost,
//     or it ran a release that took the clock) would be refused as a
//     replay until every peer restarted. While the process used last is
//     heard, a lower incarnation does not count, so a heartbeat captured
//     from a live director's earlier life cannot displace it; nor does
//     one of the last maxRetired incarnations used from that name, higher
//     or lower, ever again. Forgetting a name when it fails would be
//     simpler but would let its captured heartbeats, which echo this
//     process, bring a dead director back to life.
//
// The loop goroutine owns it.
type heartbeatGuard struct {
	// quiet is how long the incarnation used last from a director must be
	// silent before a lower one counts: the failure timeout.
	quiet time.Duration
	used  map[string]hbStamp   // newest heartbeat used per director name
	heard map[uint64]time.Time // incarnations heard from, when last; echoed
	// unused counts the heartbeats refused (old or unproven), for the view:
	// a few when directors start or a host is loaded, many under a replay.
	unused uint64
}

type hbStamp struct {
	incarnation, seq uint64
	at               time.Time // when it was used: to forget the oldest first, and the silence of its process
	retired          []uint64  // incarnations used before, newest last; at most maxRetired
}

// hbVerdict is what a heartbeat may do.
type hbVerdict int

const (
	hbOld      hbVerdict = iota // not newer than one used: a replay or late
	hbUnproven                  // a director without memory that does not echo this one yet
	hbSamePart                  // another part of the heartbeat used last: claims only
	hbFresh                     // newer: refreshes liveness
)

const (
	// echoFor is how long an incarnation is echoed after its last
	// heartbeat; a live director is heard every heartbeat interval.
	echoFor = 10 * time.Second
	// maxRemembered bounds the directors whose last heartbeat is kept;
	// beyond it the one used longest ago is forgotten (and must echo again).
	maxRemembered = 1024
	// maxRetired bounds the earlier incarnations remembered per director:
	// a heartbeat captured more restarts ago than that, and of a higher
	// incarnation than the live process's, would count again.
	maxRetired = 8
)

// check classifies hb, received at at by the process with incarnation
// self, and records it when it counts.
func (g *heartbeatGuard) check(hb heartbeat, self uint64, at time.Time) hbVerdict {
	if g.used == nil {
		g.used, g.heard = map[string]hbStamp{}, map[uint64]time.Time{}
	}
	v := g.classify(hb, self, at)
	if v != hbOld {
		// Echoed even if it does not count yet: two directors that start
		// together each wait for the other's echo.
		g.heard[hb.Incarnation] = at
	}
	if v == hbOld || v == hbUnproven {
		g.unused++
	}
	if v != hbFresh {
		return v
	}
	last, known := g.used[hb.Name]
	if !known && len(g.used) >= maxRemembered {
		oldest := ""
		for name, s := range g.used {
			if oldest == "" || s.at.Before(g.used[oldest].at) {
				oldest = name
			}
		}
		delete(g.used, oldest)
	}
	retired := last.retired
	if known && hb.Incarnation != last.incarnation {
		retired = append(slices.Clone(retired), last.incarnation)
		retired = retired[max(0, len(retired)-maxRetired):]
	}
	g.used[hb.Name] = hbStamp{hb.Incarnation, hb.Seq, at, retired}
	return hbFresh
}

func (g *heartbeatGuard) classify(hb heartbeat, self uint64, at time.Time) hbVerdict {
	last, known := g.used[hb.Name]
	switch {
	case !known:
	case hb.Incarnation == last.incarnation:
		switch {
		case hb.Seq < last.seq:
			return hbOld
		case hb.Seq == last.seq:
			return hbSamePart
		}
		return hbFresh
	case slices.Contains(last.retired, hb.Incarnation):
		return hbOld
	case hb.Incarnation < last.incarnation && at.Sub(last.at) <= g.quiet:
		// Perhaps a restart with an earlier incarnation, perhaps a
		// replay: it counts once the process used last is silent.
		return hbUnproven
	}
	// A new process: it must echo this one.
	if !slices.Contains(hb.Heard, self) {
		return hbUnproven
	}
	return hbFresh
}

// knows reports whether a heartbeat of this incarnation was heard lately.
func (g *heartbeatGuard) knows(incarnation uint64) bool {
	_, ok := g.heard[incarnation]
	return ok
}

// echo returns the incarnations to put in this director's heartbeats: the
// ones heard within echoFor, newest first, at most maxHeard.
func (g *heartbeatGuard) echo(now time.Time) []uint64 {
	maps.DeleteFunc(g.heard, func(_ uint64, at time.Time) bool { return now.Sub(at) > echoFor })
	out := slices.Collect(maps.Keys(g.heard))
	slices.SortFunc(out, func(a, b uint64) int { return g.heard[b].Compare(g.heard[a]) })
	return out[:min(len(out), maxHeard)]
}
