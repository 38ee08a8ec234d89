package cluster

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// View is the cluster as one director sees it, for `lvsd status`.
type View struct {
	Node      string `json:"node"`
	Mode      Mode   `json:"mode"`
	Preempt   bool   `json:"preempt"`
	Encrypted bool   `json:"encrypted"`
	// State is starting (start-up hold), active (holds VIPs), standby
	// (holds none), no-quorum (holds none: too few directors seen) or
	// leaving.
	State   string       `json:"state"`
	Quorum  int          `json:"quorum"`
	Live    int          `json:"live"`    // directors counted for the quorum (heard within two failure timeouts), this one included
	Members []MemberView `json:"members"` // this director first, then by name
	VIPs    []VIPView    `json:"vips"`
	// Stalls counts times this process was not scheduled for long enough
	// to postpone failure detection (a loaded or paused host).
	Stalls int `json:"stalls"`
	// UnusedHeartbeats counts heartbeats that refreshed nothing: older than
	// the last one used from their sender (late, or replayed), or from a
	// director without memory here that does not echo this one yet. A few
	// when directors start or a host is loaded; many under a replay.
	UnusedHeartbeats uint64 `json:"unused_heartbeats"`
	// RefusedPackets counts cluster messages that failed authentication
	// (another key or label, or a stranger's junk that got past the
	// cluster port's filter); RefusedStreams TCP connections to the
	// cluster port closed unread: over the limit of streams at a time,
	// silent for too long, or longer than a director sends.
	RefusedPackets uint64 `json:"refused_packets"`
	RefusedStreams uint64 `json:"refused_streams"`
	// Refused counts heartbeats refused before any use, by reason: "future
	// incarnation", and with cluster.directors "unsigned", "unknown name"
	// and "bad signature". Any of them is a misconfigured director or a
	// forger holding the cluster key.
	Refused map[string]uint64 `json:"refused,omitempty"`
	// ConfigDigest is the digest of this director's service configuration
	// of ConfigServices services, as advertised to the peers; each peer's
	// MemberView.Config compares with it.
	ConfigDigest   string `json:"config_digest,omitempty"`
	ConfigServices int    `json:"config_services,omitempty"`
	// Signed: this director signs its messages; IdentitiesEnforced: it
	// believes only messages signed by the director they name.
	Signed             bool `json:"signed,omitempty"`
	IdentitiesEnforced bool `json:"identities_enforced,omitempty"`
}

// MemberView is one director.
type MemberView struct {
	Name     string `json:"name"`
	Address  string `json:"address,omitempty"`
	Self     bool   `json:"self,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Gossip is memberlist's opinion: alive, failed (or left), or unknown
	// (heard through heartbeats only).
	Gossip string `json:"gossip"`
	// Live: heartbeats arrive (and have for the rise time); only live
	// directors count for the quorum and may own VIPs.
	Live      bool   `json:"live"`
	Ready     bool   `json:"ready"` // past its start-up hold
	LastHeard string `json:"last_heard,omitempty"`
	// WireVersion is the version of the heartbeats heard from it, which it
	// is sent in (3: the release before identities).
	WireVersion int      `json:"wire_version,omitempty"`
	Holds       []string `json:"holds,omitempty"`
	// Config compares its service configuration with this director's;
	// nil for this director, or when this one advertises none.
	Config *ConfigView `json:"config,omitempty"`
	// RestartHoldSeconds is what is left of the director's restart hold
	// (`lvsd restart-hold`): it is about to restart, or restarting, and
	// its VIPs stay where they are meanwhile.
	RestartHoldSeconds float64 `json:"restart_hold_seconds,omitempty"`
}

// VIPView is one VIP: who should own it in this director's view and who
// claims it.
type VIPView struct {
	VIP     string   `json:"vip"`
	Owner   string   `json:"owner,omitempty"` // empty: no owner (no quorum, nobody ready)
	Held    bool     `json:"held"`            // by this director
	Holders []string `json:"holders,omitempty"`
}

// View returns the current view. It asks the node's loop, so it waits at
// most until ctx ends.
func (n *Node) View(ctx context.Context) (View, error) {
	var v View
	err := n.do(ctx, func() { v = n.st.view(time.Now()) })
	return v, err
}

func (s *loopState) view(now time.Time) View {
	n := s.n
	live := s.candidates()
	vips := s.vipList()
	owners := Owners(s.rules(), live, vips)
	v := View{Node: n.cfg.Name, Mode: n.cfg.Rules.Mode, Preempt: n.cfg.Rules.Preempt, Encrypted: !n.cfg.Insecure,
		Quorum: n.cfg.Rules.Quorum, Live: len(live), Stalls: s.stalls, UnusedHeartbeats: s.guard.unused,
		RefusedPackets: n.port.refusedPackets.Load(), RefusedStreams: n.port.refusedStreams.Load(),
		Refused: n.refused.snapshot(), Signed: n.cfg.Identity.Signs(), IdentitiesEnforced: n.cfg.Identity.Enforced()}
	if s.config != nil {
		v.ConfigDigest, v.ConfigServices = s.config.String(), s.config.Services()
	}
	switch {
	case s.leaving:
		v.State = "leaving"
	case !s.ready:
		v.State = "starting"
	case !s.quorate:
		v.State = "no-quorum"
	case len(s.want) > 0:
		v.State = "active"
	default:
		v.State = "standby"
	}
	v.Members = append(v.Members, MemberView{Name: n.cfg.Name, Address: n.ml.LocalNode().Address(), Self: true,
		Priority: n.cfg.Priority, Gossip: "alive", Live: true, Ready: s.ready && !s.leaving, Holds: held(s.claims()),
		RestartHoldSeconds: s.restartHoldLeft(now).Round(time.Millisecond).Seconds()})
	names := slices.Sorted(maps.Keys(s.peers))
	for name := range s.members {
		if _, ok := s.peers[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		m := MemberView{Name: name, Gossip: "unknown"}
		if ev, ok := s.members[name]; ok {
			m.Address, m.Gossip = ev.addr, "failed"
			if ev.alive {
				m.Gossip = "alive"
			}
		}
		if p := s.peers[name]; p != nil {
			m.Address = p.addr
			m.WireVersion = int(s.wire[p.addr].version)
			m.Priority, m.Live, m.Ready = p.priority, p.state.live(), p.ready
			if !p.lastHeard.IsZero() {
				m.LastHeard = now.Sub(p.lastHeard).Round(time.Millisecond).String() + " ago"
			}
			if p.state.live() || p.state == peerRestarting {
				m.Holds = held(p.vips)
			}
			m.Config = s.configView(p)
			if now.Before(p.holdUntil) {
				m.RestartHoldSeconds = p.holdUntil.Sub(now).Round(time.Millisecond).Seconds()
			}
		}
		if n.cfg.Rules.Mode == ActiveActive {
			m.Priority = 0
		}
		v.Members = append(v.Members, m)
	}
	for _, vip := range vips {
		vv := VIPView{VIP: vip.String(), Owner: owners[vip], Held: s.want[vip]}
		for _, c := range live {
			if c.VIPs[vip] {
				vv.Holders = append(vv.Holders, c.Name)
			}
		}
		v.VIPs = append(v.VIPs, vv)
	}
	if n.cfg.Rules.Mode == ActiveActive {
		v.Members[0].Priority = 0
	}
	return v
}

func held(claims map[netip.Addr]bool) []string {
	var out []netip.Addr
	for a, h := range claims {
		if h {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	s := make([]string, len(out))
	for i, a := range out {
		s[i] = a.String()
	}
	return s
}
