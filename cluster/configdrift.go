package cluster

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxDriftShown bounds the services named in the view and the log.
const maxDriftShown = 20

// Config matches, for ConfigView.Match.
const (
	ConfigSame      = "same"
	ConfigDifferent = "different"
	// ConfigUnknown: the peer sends no digest (a director of an earlier
	// release, or wire version 3) or one of another scheme.
	ConfigUnknown = "unknown"
)

// ConfigView is how a peer's service configuration compares with this
// director's.
type ConfigView struct {
	Match string `json:"match"`
	// Services names the services that differ (defined differently, or
	// on one director only) as far as compared, in name order, at most
	// 20; Differing counts them all.
	Services  []string `json:"services,omitempty"`
	Differing int      `json:"differing,omitempty"`
	// Compared: every service of both directors was compared; until
	// then the services named are the ones found so far.
	Compared bool `json:"compared,omitempty"`
	// FlowsAtRisk: under cluster mode ecmp the routers spread a VIP's
	// flows over every director, so a service defined differently on two
	// live directors schedules its clients differently on each: a flow
	// rehashed to the other director may land on another backend.
	FlowsAtRisk bool `json:"flows_at_risk,omitempty"`
	// Held: the services differ only because this director holds a
	// loaded change out of force until every live director has it
	// (coordinated changes); the peer runs the definitions in force here,
	// so no flow is at risk.
	Held bool `json:"held,omitempty"`
}

// peerConfig is what this director knows of a peer's configuration.
type peerConfig struct {
	advert configAdvert // scheme 0: none heard
	// got are the peer's per-service digests by index in its list, from
	// the runs of the digest tagged tag; diff the names of the services
	// that differ from this director's as far as compared.
	tag      [4]byte
	got      map[uint32]serviceDigest
	diff     map[string]bool
	compared bool
	// heldOnly: compared, the peer differs only in services of this
	// director's held change, where it has the definitions in force here.
	heldOnly bool
	// logged is the difference as last logged ("": none).
	logged string
}

// AdvertiseConfig sets the service configuration this director
// advertises, once per configuration load. Safe to call from any
// goroutine.
func (n *Node) AdvertiseConfig(d *ConfigDigest) {
	n.mu.Lock()
	n.config = d
	n.mu.Unlock()
	n.signal()
}

// takeConfig puts this director's new configuration digest in force: the
// peers' differences are compared again.
func (s *loopState) takeConfig(d *ConfigDigest) {
	s.config, s.configDirty = d, true
	for _, p := range s.peers {
		if p.config != nil {
			s.compareConfig(p)
		}
	}
}

// configExtensions are the configuration extensions of the next heartbeat:
// the digest always, and a run of the per-service digests while some
// peer's digest differs.
func (s *loopState) configExtensions() (*configAdvert, *configRun) {
	d := s.config
	if d == nil {
		return nil, nil
	}
	for _, p := range s.peers {
		if pc := p.config; pc != nil && p.state.counted() && pc.advert.scheme == d.Scheme && pc.advert.sum != d.Sum {
			var run *configRun
			run, s.configNext = runFrom(d, s.configNext)
			return advertOf(d), run
		}
	}
	return advertOf(d), nil
}

// noteConfig records what a heartbeat of p says of its configuration. A
// heartbeat without it (a v3 part) changes nothing: the v3 and v4 parts
// of one heartbeat arrive together while the peer's version is unknown.
func (s *loopState) noteConfig(p *peer, hb heartbeat) {
	if hb.Config == nil {
		return
	}
	if p.config == nil {
		p.config = &peerConfig{}
	}
	pc := p.config
	if pc.advert != *hb.Config {
		pc.advert, s.configDirty = *hb.Config, true
		s.compareConfig(p)
	}
	r := hb.ConfigRun
	if r == nil || [4]byte(pc.advert.sum[:4]) != r.tag || r.services != pc.advert.services {
		return
	}
	// A run costs its entries; the whole comparison runs once per
	// rotation, when the last of the peer's services arrives.
	if pc.addRun(s.config, r) {
		s.configDirty = true
		if !pc.compared && uint32(len(pc.got)) == pc.advert.services {
			s.compareConfig(p)
		}
	}
}

// addRun adds a run of the peer's per-service digests; it reports whether
// the run told anything new.
func (pc *peerConfig) addRun(own *ConfigDigest, r *configRun) bool {
	added := false
	if pc.got == nil || pc.tag != r.tag {
		pc.tag, pc.got, pc.diff, pc.compared = r.tag, map[uint32]serviceDigest{}, map[string]bool{}, false
		added = true // a peer without services is compared by its first run
	}
	for i, e := range r.entries {
		at := r.start + uint32(i)
		if _, ok := pc.got[at]; ok {
			continue
		}
		pc.got[at], added = e, true
		if own != nil {
			if sum, ok := own.byName[e.name]; !ok || sum != e.sum {
				pc.diff[e.name] = true
			}
		}
	}
	return added
}

// compareConfig brings p's comparison up to date with both configurations
// and logs a difference that starts, changes or ends.
func (s *loopState) compareConfig(p *peer) {
	pc, own := p.config, s.config
	switch {
	case own == nil || pc.advert.scheme != own.Scheme:
		return
	case pc.advert.sum == own.Sum:
		pc.got, pc.diff, pc.compared, pc.heldOnly = nil, nil, false, false
		if pc.logged != "" {
			pc.logged = ""
			s.n.log.Info("service configuration matches the peer's again", "peer", p.name)
		}
		return
	case pc.got == nil || [4]byte(pc.advert.sum[:4]) != pc.tag:
		pc.got, pc.diff, pc.compared, pc.heldOnly = nil, nil, false, false // no run of the peer's current digest yet
		return
	}
	pc.diff = map[string]bool{}
	theirs := make(map[string]bool, len(pc.got))
	heldOnly := own.inForce != nil
	for _, e := range pc.got {
		theirs[e.name] = true
		if sum, ok := own.byName[e.name]; !ok || sum != e.sum {
			pc.diff[e.name] = true
			heldOnly = heldOnly && own.inForceIs(e.name, e.sum, true)
		}
	}
	pc.compared = uint32(len(pc.got)) == pc.advert.services
	pc.heldOnly = false
	if pc.compared {
		for _, e := range own.services {
			if !theirs[e.name] {
				pc.diff[e.name] = true
				heldOnly = heldOnly && own.inForceIs(e.name, 0, false)
			}
		}
		pc.heldOnly = heldOnly && len(pc.diff) > 0
		s.logDrift(p)
	}
}

// inForceIs says whether the configuration in force while d is held
// defines service name with digest sum (has: defines it at all).
func (d *ConfigDigest) inForceIs(name string, sum uint64, has bool) bool {
	got, ok := d.inForce.byName[name]
	return ok == has && got == sum
}

// ServiceList is service names for a log line: the first maxDriftShown,
// then how many more (",+N").
func ServiceList(names []string) string {
	shown := names[:min(len(names), maxDriftShown)]
	line := strings.Join(shown, ",")
	if len(names) > len(shown) {
		line += ",+" + strconv.Itoa(len(names)-len(shown))
	}
	return line
}

// logDrift logs p's difference when it is not the one logged last.
func (s *loopState) logDrift(p *peer) {
	pc := p.config
	names := slices.Sorted(maps.Keys(pc.diff))
	line := ServiceList(names)
	if line == "" {
		line = "(unnamed)" // the digests differ, yet no service does: names cut alike
	}
	key := line
	if pc.heldOnly {
		key = "held " + line // when the hold ends on a peer that still differs, that is drift: logged again
	}
	if key == pc.logged {
		return
	}
	pc.logged = key
	args := []any{"peer", p.name, "services", line, "differing", len(names)}
	if pc.heldOnly {
		s.n.log.Info("service configuration differs from the peer's only by the change held here: it goes in force "+
			"once every live director has it, at the latest at held_until; the peer runs the definitions in force here",
			append(args, "held_until", s.config.heldUntil.Format(time.RFC3339))...)
		return
	}
	msg := "service configuration differs from the peer's"
	if s.n.cfg.Rules.Mode == ECMP {
		msg += "; under ecmp the flows of these services are at risk"
		args = append(args, "flows_at_risk", true)
	}
	s.n.log.Warn(msg, args...)
}

// configView is how p's configuration compares, for the view; nil when
// this director advertises none.
func (s *loopState) configView(p *peer) *ConfigView {
	own := s.config
	if own == nil {
		return nil
	}
	pc := p.config
	switch {
	case pc == nil || pc.advert.scheme != own.Scheme:
		return &ConfigView{Match: ConfigUnknown}
	case pc.advert.sum == own.Sum:
		return &ConfigView{Match: ConfigSame}
	}
	names := slices.Sorted(maps.Keys(pc.diff))
	return &ConfigView{Match: ConfigDifferent, Services: names[:min(len(names), maxDriftShown)], Differing: len(names),
		Compared: pc.compared, Held: pc.heldOnly, FlowsAtRisk: s.n.cfg.Rules.Mode == ECMP && p.state.live() && !pc.heldOnly}
}
