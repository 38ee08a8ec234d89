package cluster

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// What the loop tells the operator about its decisions: quorum, VIPs taken
// and released with why, waits and conflicts. Each is logged once per
// change, not per evaluation.

// noteQuorum logs when the quorum is reached or lost.
func (s *loopState) noteQuorum(live int) {
	n := s.n
	quorate := live >= n.cfg.Rules.Quorum
	if quorate == s.quorate {
		return
	}
	s.quorate = quorate
	switch {
	case quorate:
		n.log.Info("quorum reached", "live", live, "quorum", n.cfg.Rules.Quorum)
	case n.cfg.Rules.Mode == ECMP && len(s.homes) == 0: // every director keeps serving what the routers send it
		n.log.Info("fewer directors heard than the quorum: under ECMP without FULLNAT this changes nothing", "live", live, "quorum", n.cfg.Rules.Quorum)
	case n.cfg.Rules.Mode == ECMP:
		n.log.Warn("quorum lost: this director takes over no lost director's FULLNAT source addresses until it hears a quorum", "live", live, "quorum", n.cfg.Rules.Quorum)
	default:
		n.log.Warn("quorum lost: releasing every VIP", "live", live, "quorum", n.cfg.Rules.Quorum)
	}
}

// logMoves logs each VIP taken or released by st, with why it goes.
func (s *loopState) logMoves(st Step, live []Candidate, vips []netip.Addr) {
	n := s.n
	for v := range st.Hold {
		if !s.want[v] {
			n.log.Info("taking VIP", "vip", v.String(), "live", len(live))
		}
	}
	if maps.Equal(st.Hold, s.want) {
		return
	}
	owners := Owners(s.rules(), live, vips)
	for v := range s.want {
		if st.Hold[v] {
			continue
		}
		reason := "owned by " + owners[v]
		switch {
		case s.leaving:
			reason = "leaving"
		case !s.vips[v]:
			// The agent serves none while its interface is down or its
			// upstream check fails, and says so just before.
			reason = "not served by this director"
		case !s.quorate:
			reason = "no quorum"
		case owners[v] == n.cfg.Name:
			reason = "held by a director ranked first"
		case owners[v] == "":
			reason = "no owner"
		}
		n.log.Info("releasing VIP", "vip", v.String(), "reason", reason)
	}
}

// noteWaiting logs, once each, the VIPs this director owns but waits for.
func (s *loopState) noteWaiting(waiting []netip.Addr, live []Candidate) {
	for _, v := range waiting {
		if s.waiting[v] {
			continue
		}
		if h := s.holders(v, live); len(h) > 0 {
			s.n.log.Info("waiting for the holder to release VIP", "vip", v.String(), "holders", strings.Join(h, ","))
		} else {
			s.n.log.Info("waiting for a starting director ranked first for VIP", "vip", v.String())
		}
	}
	s.waiting = map[netip.Addr]bool{}
	for _, v := range waiting {
		s.waiting[v] = true
	}
}

// noteConflicts logs VIPs held by two directors, and announces a VIP again
// once the other holder let go: the link may have learned it there.
func (s *loopState) noteConflicts(st Step, live []Candidate) {
	n := s.n
	for _, v := range st.Conflicts {
		if _, seen := s.conflicts[v]; !seen {
			others := strings.Join(s.holders(v, live), ",")
			n.log.Warn("VIP held by another director too; the lower ranked one lets go", "vip", v.String(), "holders", others)
			s.conflicts[v] = others
		}
	}
	for v := range s.conflicts {
		if slices.Contains(st.Conflicts, v) {
			continue
		}
		delete(s.conflicts, v)
		if st.Hold[v] && n.cfg.Reannounce != nil {
			n.log.Info("VIP conflict over; announcing again", "vip", v.String())
			go n.cfg.Reannounce(v)
		}
	}
}

// holders names the live directors other than this one claiming v.
func (s *loopState) holders(v netip.Addr, live []Candidate) []string {
	var out []string
	for _, c := range live {
		if c.Name != s.n.cfg.Name && c.VIPs[v] {
			out = append(out, c.Name)
		}
	}
	return out
}
