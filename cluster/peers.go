package cluster

import (
	"maps"
	"net/netip"
	"time"
)

// peer is another director as this one hears it.
type peer struct {
	name        string
	addr        string
	incarnation uint64
	state       peerState
	lastHeard   time.Time // zero: not heard since it failed or left
	since       time.Time // start of the current unbroken run of heartbeats
	ready       bool
	priority    int
	vips        map[netip.Addr]bool
	// health is what the peer votes in the health vote (nil: it does
	// not vote): the targets it sees down, by HealthID.
	health   map[uint64]bool
	claimSeq uint64
	pendSeq  uint64
	pend     map[int]heartbeat
	// pendVersion is the wire version of the parts in pend.
	pendVersion byte
	config      *peerConfig // nil: no configuration digest heard
	// holdUntil ends the restart hold the peer asked for (zero: none):
	// until then its silence does not void its claims (restarthold.go).
	holdUntil time.Time
}

// peerState is how this director hears a peer. It moves at each liveness
// check (peerAt), and at once when a heartbeat arrives from a peer that was
// gone (it rises) or says it leaves.
type peerState int

const (
	// peerGone: not heard within two failure timeouts, or never.
	peerGone peerState = iota
	// peerRising: heard, but not yet for the rise time without a gap: it
	// owns nothing, but what it claims is not taken from it.
	peerRising
	// peerLive: heard within half a failure timeout, risen.
	peerLive
	// peerUnsure: live, but not heard for half a failure timeout. It still
	// owns and counts, but not towards the quorum needed to take a VIP: a
	// director being cut off sees its peers go quiet one after the other.
	peerUnsure
	// peerLingering: silent for longer than the failure timeout, not yet
	// two: it owns nothing and its claims are void, but it still counts
	// for the quorum (Candidate.Lingering says why).
	peerLingering
	// peerLeft: said it leaves the cluster.
	peerLeft
	// peerRestarting: silent for longer than the failure timeout under
	// its restart hold: it owns nothing, but what it claims is not taken
	// from it (as rising), and it counts for the quorum, until the hold
	// ends.
	peerRestarting
)

var peerStateNames = [...]string{"gone", "rising", "live", "unsure", "lingering", "left", "restarting"}

func (s peerState) String() string { return peerStateNames[s] }

// live reports whether the peer counts as a live director (owns VIPs).
func (s peerState) live() bool { return s == peerLive || s == peerUnsure }

// counted reports whether the peer counts for the quorum and gets
// connection-sync messages: heard within two failure timeouts.
func (s peerState) counted() bool { return s != peerGone && s != peerLeft }

// peerAt classifies p at now. A peer that left stays so until it sends a
// heartbeat again; a live one stays live while it is heard within the
// failure timeout, whatever its rise time (it has risen).
func peerAt(p *peer, now time.Time, timeout, rise time.Duration) peerState {
	silence := now.Sub(p.lastHeard)
	switch {
	case p.state == peerLeft:
		return peerLeft
	case !p.lastHeard.IsZero() && silence > timeout && now.Before(p.holdUntil):
		return peerRestarting
	case p.lastHeard.IsZero() || silence > 2*timeout:
		return peerGone
	case silence > timeout:
		return peerLingering
	case !p.state.live() && now.Sub(p.since) < rise:
		return peerRising
	case silence > timeout/2:
		return peerUnsure
	}
	return peerLive
}

// onHeartbeat records a heartbeat; it reports whether it changed anything
// the ownership decision depends on. Only a heartbeat newer than the last
// one used from its sender refreshes liveness (heartbeatGuard).
func (s *loopState) onHeartbeat(hb heartbeat, at time.Time) bool {
	n := s.n
	if hb.Name == n.cfg.Name {
		if hb.Incarnation != n.incarnation {
			n.log.Error("another director uses this node's name; every node name must be unique", "node", hb.Name, "address", hb.Addr)
		}
		return false
	}
	s.noteVersion(hb, at)
	first := !s.guard.knows(hb.Incarnation)
	before, known := s.guard.used[hb.Name]
	verdict := s.guard.check(hb, n.incarnation, at)
	if verdict == hbFresh && known && hb.Incarnation < before.incarnation {
		// Taken only once the incarnation before fell silent (freshness.go).
		n.log.Warn("director restarted with an earlier incarnation; accepting it",
			"peer", hb.Name, "incarnation", hb.Incarnation, "previous", before.incarnation)
	}
	if verdict == hbUnproven && first && hb.Addr != "" {
		// A director that has not heard this one yet (it started, or this
		// one did): answer at once at its address, so that it echoes this
		// process within a round trip rather than at its next heartbeat.
		s.sendTo(hb.Addr)
	}
	if verdict == hbOld || verdict == hbUnproven {
		return false
	}
	fresh := verdict == hbFresh
	p := s.peers[hb.Name]
	if p == nil {
		p = &peer{name: hb.Name}
		s.peers[hb.Name] = p
	}
	restarted := false
	if hb.Incarnation != p.incarnation {
		// A new process: it holds nothing and must rise again (what it
		// claims from its first heartbeat holds back a takeover).
		switch {
		case p.state == peerRestarting || at.Before(p.holdUntil):
			n.log.Info("director back from a planned restart", "peer", p.name,
				"silence", at.Sub(p.lastHeard).Round(time.Millisecond).String())
		case p.incarnation != 0:
			n.log.Info("director restarted", "peer", p.name)
		}
		restarted = p.state.live()
		*p = peer{name: hb.Name, incarnation: hb.Incarnation}
		n.auth.set(p.name, nil, at)
	}
	timeout := n.cfg.FailureTimeout
	if hb.Leaving {
		changed := p.state != peerLeft || restarted
		if p.state != peerLeft {
			n.log.Info("director left", "peer", p.name)
		}
		p.state, p.lastHeard, p.vips = peerLeft, time.Time{}, nil
		n.auth.set(p.name, nil, at)
		return changed
	}
	// A rise restarts after a gap. A live peer stays live: only a check
	// that saw the silence in time declares a failure; if none ran (this
	// process was not scheduled either), the peer never looked failed.
	if fresh && !p.state.live() && (p.lastHeard.IsZero() || at.Sub(p.lastHeard) > timeout) {
		p.since = at
	}
	if fresh && at.After(p.lastHeard) {
		p.lastHeard = at
	}
	if fresh && hb.Version >= hbVersion {
		// Only v4 carries the hold: a v3 part says nothing about it.
		s.noteRestartHold(p, hb.RestartHold, at)
	}
	switch {
	case !fresh:
		// Another part of a heartbeat already used: claims only.
	case p.state.live():
		p.state = peerLive // heard: sure again
	default:
		p.state = peerRising // heard now: its claims count before the next check
	}
	p.addr = hb.Addr
	s.noteConfig(p, hb)
	changed := restarted
	if p.ready != hb.Ready || p.priority != hb.Priority {
		p.ready, p.priority = hb.Ready, hb.Priority
		changed = p.state.live()
	}
	if a := p.assemble(hb); a != nil {
		if !maps.Equal(a.claims, p.vips) {
			p.vips = a.claims
			n.auth.set(p.name, a.claims, at)
			changed = true // even a rising peer's claims hold back a takeover
		}
		if (a.health == nil) != (p.health == nil) || !maps.Equal(a.health, p.health) {
			p.health = a.health
			s.healthDirty = true
		}
	}
	if fresh {
		s.joinIfNotMember(hb, at)
	}
	return changed
}

// joinIfNotMember asks to join the sender of a fresh heartbeat that is not
// a live member: a healed partition. Joining now is faster than waiting
// for the next rejoin tick.
func (s *loopState) joinIfNotMember(hb heartbeat, at time.Time) {
	if m, ok := s.members[hb.Name]; ok && m.alive || hb.Addr == "" || at.Sub(s.joinAsked[hb.Addr]) <= 2*time.Second {
		return
	}
	s.joinAsked[hb.Addr] = at
	select {
	case s.n.joinReq <- hb.Addr:
	default:
	}
}

// assembled is what a whole heartbeat (all its parts) says.
type assembled struct {
	claims map[netip.Addr]bool
	health map[uint64]bool // nil: the sender does not vote
}

// assemble returns what the peer's heartbeat says once every part of a
// heartbeat at least as new as the last one used has arrived (memberlist
// hands messages over newest first), else nil.
func (p *peer) assemble(hb heartbeat) *assembled {
	if hb.Seq < p.claimSeq {
		return nil
	}
	all := []heartbeat{hb}
	if hb.Parts > 1 {
		// The v3 and v4 parts of one heartbeat (sent both while a peer's
		// version is unknown) split the claims differently: never mixed.
		if p.pendSeq != hb.Seq || p.pendVersion != hb.Version || p.pend == nil {
			p.pendSeq, p.pendVersion, p.pend = hb.Seq, hb.Version, map[int]heartbeat{}
		}
		p.pend[hb.Part] = hb
		if len(p.pend) < hb.Parts {
			return nil
		}
		all = all[:0]
		for i := range hb.Parts {
			all = append(all, p.pend[i])
		}
		p.pend = nil
	}
	p.claimSeq = hb.Seq
	out := &assembled{claims: map[netip.Addr]bool{}}
	if hb.SharesHealth {
		out.health = map[uint64]bool{}
	}
	for _, part := range all {
		for _, c := range part.VIPs {
			out.claims[c.VIP] = c.Held
		}
		if out.health != nil {
			for _, id := range part.Down {
				out.health[id] = true
			}
		}
	}
	return out
}

// onCheck updates liveness. A check that comes much later than scheduled
// means this process was not running (CPU starvation, a VM paused): the
// peers' heartbeats may be waiting unread in the socket, so their silence
// is not held against them; they get two more heartbeat intervals.
func (s *loopState) onCheck(now time.Time) bool {
	n := s.n
	timeout := n.cfg.FailureTimeout
	lag := now.Sub(s.lastCheck)
	s.lastCheck = now
	n.lastCheck.Store(now.UnixNano())
	if lag > max(4*s.checkEvery(), timeout/3) {
		s.stalls++
		if !s.ready {
			// The start-up hold is for hearing who holds what: time this
			// process did not run does not count.
			s.holdLost += lag
		}
		n.log.Debug("this process was not scheduled; failure detection postponed", "stall", lag.String())
		floor := now.Add(-timeout + 2*n.cfg.HeartbeatInterval)
		for _, p := range s.peers {
			if p.state.live() && p.lastHeard.Before(floor) {
				p.lastHeard = floor
			}
		}
	}
	changed := s.endAdoption(now)
	if !s.ready && !s.leaving && now.Sub(n.started)-s.holdLost >= n.cfg.StartupHold {
		if n.syncCaughtUp() {
			s.ready, changed = true, true
			n.log.Info("start-up hold over; may own VIPs now", "live", s.liveCount())
		} else if !s.awaitingSync {
			s.awaitingSync = true
			n.log.Info("start-up hold over; waiting for the other directors' connections before owning VIPs")
		}
	}
	for _, p := range s.peers {
		next := peerAt(p, now, timeout, n.cfg.Rise)
		if next == p.state {
			continue
		}
		was := p.state
		p.state, changed = next, true
		switch {
		case next == peerRestarting:
			n.log.Info("director silent under its restart hold; its VIPs stay where they are", "peer", p.name,
				"hold_left", p.holdUntil.Sub(now).Round(time.Millisecond).String(), "live", s.liveCount())
		case was == peerRestarting && !next.live():
			n.log.Warn("director not back within its restart hold", "peer", p.name, "state", next.String(),
				"silence", now.Sub(p.lastHeard).Round(time.Millisecond).String(), "live", s.liveCount())
		case next.live() && !was.live():
			n.log.Info("director up", "peer", p.name, "address", p.addr, "live", s.liveCount())
		case was.live() && !next.live():
			n.log.Warn("director failed: no heartbeat", "peer", p.name, "silence", now.Sub(p.lastHeard).Round(time.Millisecond).String(),
				"failure_timeout", timeout.String(), "live", s.liveCount())
		}
	}
	return changed
}

func (s *loopState) liveCount() int {
	k := 1
	for _, p := range s.peers {
		if p.state.live() {
			k++
		}
	}
	return k
}

// sendTo sends a heartbeat to one address only.
func (s *loopState) sendTo(addr string) {
	var enc encodings
	if err := s.sendParts(addr, s.heartbeat(false), &enc); err != nil {
		s.n.log.Debug("cannot send a heartbeat", "to", addr, "err", err)
	}
}
