package cluster

import (
	"maps"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// peer is another director as this one hears it.
type peer struct {
	name        string
	addr        string
	incarnation uint64
	lastHeard   time.Time // zero: not heard since it failed or left
	since       time.Time // start of the current unbroken run of heartbeats
	live        bool
	counted     bool // for the quorum, as of the last check
	unsure      bool // not heard for half a failure timeout, as of the last check
	leaving     bool
	ready       bool
	priority    int
	vips        map[netip.Addr]bool
	claimSeq    uint64
	pendSeq     uint64
	pend        map[int][]vipClaim
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
	first := !s.guard.knows(hb.Incarnation)
	verdict := s.guard.check(hb, n.incarnation, at)
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
	if hb.Incarnation > p.incarnation {
		// A new process: it holds nothing and must rise again.
		if p.incarnation != 0 {
			n.log.Info("director restarted", "peer", p.name)
		}
		restarted = p.live
		*p = peer{name: hb.Name, incarnation: hb.Incarnation}
		n.auth.set(p.name, nil, at)
	}
	timeout := n.cfg.FailureTimeout
	if hb.Leaving {
		was := p.live || restarted
		if !p.leaving {
			n.log.Info("director left", "peer", p.name)
		}
		p.leaving, p.live, p.lastHeard, p.vips = true, false, time.Time{}, nil
		n.auth.set(p.name, nil, at)
		return was
	}
	p.leaving = false
	// A rise restarts after a gap. A live peer stays live: only a check
	// that saw the silence in time declares a failure; if none ran (this
	// process was not scheduled either), the peer never looked failed.
	if fresh && !p.live && (p.lastHeard.IsZero() || at.Sub(p.lastHeard) > timeout) {
		p.since = at
	}
	if fresh && at.After(p.lastHeard) {
		p.lastHeard = at
	}
	p.addr = hb.Addr
	changed := restarted
	if p.ready != hb.Ready || p.priority != hb.Priority {
		p.ready, p.priority = hb.Ready, hb.Priority
		changed = p.live
	}
	if claims := p.assemble(hb); claims != nil && !maps.Equal(claims, p.vips) {
		p.vips = claims
		n.auth.set(p.name, claims, at)
		changed = true // even a rising peer's claims hold back a takeover
	}
	if m, ok := s.members[hb.Name]; fresh && (!ok || !m.alive) && hb.Addr != "" && at.Sub(s.joinAsked[hb.Addr]) > 2*time.Second {
		// Heard but not a member: a healed partition. Join it now rather
		// than at the next rejoin tick.
		s.joinAsked[hb.Addr] = at
		select {
		case n.joinReq <- hb.Addr:
		default:
		}
	}
	return changed
}

// assemble returns the peer's claims once every part of a heartbeat at
// least as new as the last one used has arrived (memberlist hands messages
// over newest first), else nil.
func (p *peer) assemble(hb heartbeat) map[netip.Addr]bool {
	if hb.Seq < p.claimSeq {
		return nil
	}
	var all []vipClaim
	if hb.Parts == 1 {
		all = hb.VIPs
	} else {
		if p.pendSeq != hb.Seq || p.pend == nil {
			p.pendSeq, p.pend = hb.Seq, map[int][]vipClaim{}
		}
		p.pend[hb.Part] = hb.VIPs
		if len(p.pend) < hb.Parts {
			return nil
		}
		for i := range hb.Parts {
			all = append(all, p.pend[i]...)
		}
		p.pend = nil
	}
	p.claimSeq = hb.Seq
	out := make(map[netip.Addr]bool, len(all))
	for _, c := range all {
		out[c.VIP] = c.Held
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
			if p.live && p.lastHeard.Before(floor) {
				p.lastHeard = floor
			}
		}
	}
	changed := false
	if !s.ready && !s.leaving && now.Sub(n.started)-s.holdLost >= n.cfg.StartupHold {
		s.ready, changed = true, true
		n.log.Info("start-up hold over; may own VIPs now", "live", s.liveCount())
	}
	for _, p := range s.peers {
		silence := now.Sub(p.lastHeard)
		live := !p.leaving && !p.lastHeard.IsZero() && silence <= timeout && now.Sub(p.since) >= n.cfg.Rise
		// Counted for the quorum: heard within two failure timeouts
		// (Candidate.Lingering).
		counted := !p.leaving && !p.lastHeard.IsZero() && silence <= 2*timeout
		unsure := silence > timeout/2 // Candidate.Unsure
		if counted != p.counted || unsure != p.unsure {
			p.counted, p.unsure, changed = counted, unsure, true
		}
		if live == p.live {
			continue
		}
		p.live, changed = live, true
		if live {
			n.log.Info("director up", "peer", p.name, "address", p.addr, "live", s.liveCount())
		} else if !p.leaving {
			n.log.Warn("director failed: no heartbeat", "peer", p.name, "silence", silence.Round(time.Millisecond).String(),
				"failure_timeout", timeout.String(), "live", s.liveCount())
		}
	}
	return changed
}

func (s *loopState) liveCount() int {
	k := 1
	for _, p := range s.peers {
		if p.live {
			k++
		}
	}
	return k
}

// heard reports whether p is heard now (within the failure timeout) though
// not live yet.
func (s *loopState) heard(p *peer, now time.Time) bool {
	return !p.leaving && !p.lastHeard.IsZero() && now.Sub(p.lastHeard) <= s.n.cfg.FailureTimeout
}

// sendTo sends a heartbeat to one address only.
func (s *loopState) sendTo(addr string) {
	for _, p := range s.heartbeat(false).encode() {
		if err := s.n.ml.SendToAddress(memberlist.Address{Addr: addr}, p); err != nil {
			s.n.log.Debug("cannot send a heartbeat", "to", addr, "err", err)
			return
		}
	}
}
