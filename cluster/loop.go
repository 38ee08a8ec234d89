package cluster

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// loopState is everything the loop goroutine owns.
type loopState struct {
	n         *Node
	peers     map[string]*peer
	vips      map[netip.Addr]bool   // VIPs this node decides about
	homes     map[netip.Addr]string // of the VIPs, the ones with a home director (Rules.Homes)
	present   map[netip.Addr]bool   // VIP addresses on the interface now
	want      map[netip.Addr]bool   // VIPs this node holds (published to Holds)
	conflicts map[netip.Addr]string
	waiting   map[netip.Addr]bool
	members   map[string]memberEvent // memberlist's view, by name
	seq       uint64
	ready     bool // start-up hold over
	leaving   bool
	quorate   bool
	stalls    int
	lastCheck time.Time
	joinAsked map[string]time.Time
	sendFails map[string]bool
	wire      map[string]wireVersion // heartbeat versions heard, by sender address
	// wireChanged: a version in wire changed since publishSyncPeers.
	wireChanged bool
	guard       heartbeatGuard // which heartbeats count (freshness.go)
	holdLost    time.Duration  // of the start-up hold, time this process was not scheduled (onCheck)
	// awaitingSync: the start-up hold is over but the connection state of
	// the other directors has not all arrived (Node.syncCaughtUp).
	awaitingSync bool
	// The health vote (health.go): what this node votes, and whether a
	// peer's vote changed since the last publishVotes.
	sharesHealth bool
	down         []uint64
	healthDirty  bool
	configDirty  bool // a peer's configuration, or this one's, changed since publishConfigs
	// config is the configuration this director advertises (nil: none
	// yet); configNext the first of its services in the next run
	// (configdrift.go).
	config     *ConfigDigest
	configNext int
	// The restart hold (restarthold.go): this director's own, and the
	// VIPs its predecessor held under one, adopted at start.
	restartUntil time.Time
	adopted      map[netip.Addr]bool
	adoptUntil   time.Time
	servedOnce   bool // Serve was called: vips is the agent's
}

func (s *loopState) init(n *Node) {
	*s = loopState{n: n, peers: map[string]*peer{}, vips: map[netip.Addr]bool{}, present: map[netip.Addr]bool{},
		want: map[netip.Addr]bool{}, conflicts: map[netip.Addr]string{}, waiting: map[netip.Addr]bool{},
		members: map[string]memberEvent{}, joinAsked: map[string]time.Time{}, sendFails: map[string]bool{}, wire: map[string]wireVersion{},
		guard: heartbeatGuard{quiet: n.cfg.FailureTimeout}}
}

func (s *loopState) lastCheckAt() time.Time { return time.Unix(0, s.n.lastCheck.Load()) }

// checkEvery is how often peers' silence is checked: the resolution of
// failure detection.
func (s *loopState) checkEvery() time.Duration {
	c := s.n.cfg
	return min(max(c.FailureTimeout/20, 5*time.Millisecond), c.HeartbeatInterval/2)
}

func (n *Node) run(ctx context.Context) {
	s := &n.st
	defer close(n.done)
	check := time.NewTicker(s.checkEvery())
	defer check.Stop()
	send := time.NewTicker(n.cfg.HeartbeatInterval)
	defer send.Stop()
	house := time.NewTicker(time.Second)
	defer house.Stop()
	s.lastCheck = time.Now()
	n.lastCheck.Store(s.lastCheck.UnixNano())
	keys := newKeyWatch(n)
	s.drain()
	s.evaluate()
	s.sendHeartbeat()
	for {
		var changed bool
		select {
		case <-ctx.Done():
			return
		case r := <-n.heartbeats:
			if changed = s.onHeartbeat(r.hb, r.at); changed || s.wireChanged {
				s.publishSyncPeers()
			}
		case <-n.poke:
			changed = s.drain()
		case f := <-n.reqs:
			s.drain()
			f()
			changed = true
		case <-check.C:
			if changed = s.onCheck(time.Now()); changed {
				s.publishSyncPeers()
			}
		case <-send.C:
			s.sendHeartbeat()
		case <-house.C:
			s.housekeep()
			keys.check()
		}
		if changed {
			s.evaluate()
		}
		if changed || s.healthDirty {
			s.publishVotes() // who votes follows liveness and readiness
		}
		if changed || s.configDirty {
			s.publishConfigs() // whose configuration counts follows liveness
		}
	}
}

// drain takes what other goroutines left under n.mu: new VIPs, address
// changes, memberlist events. It reports whether a decision may change.
func (s *loopState) drain() bool {
	n := s.n
	n.mu.Lock()
	served, addrs, evs, share, homes, config := n.served, n.addrEvents, n.memberEvs, n.share, n.homes, n.config
	n.served, n.memberEvs, n.share, n.homes, n.config = nil, nil, nil, nil, nil
	if len(addrs) > 0 {
		n.addrEvents = map[netip.Addr]bool{}
	}
	n.mu.Unlock()
	changed := false
	if homes != nil {
		changed = !maps.Equal(homes, s.homes)
		s.homes = homes
	}
	if served != nil {
		s.servedOnce = true
		vips := make(map[netip.Addr]bool, len(served))
		for _, v := range served {
			vips[v] = true
		}
		changed = !maps.Equal(vips, s.vips)
		s.vips = vips
	}
	for a, present := range addrs {
		if s.present[a] != present {
			changed = true
			if present {
				s.present[a] = true
			} else {
				delete(s.present, a)
			}
		}
	}
	for _, ev := range evs {
		s.onMember(ev)
	}
	vote := false
	if share != nil && (share.votes != s.sharesHealth || !slices.Equal(share.down, s.down)) {
		s.sharesHealth, s.down, vote = share.votes, share.down, true
	}
	if config != nil {
		s.takeConfig(config)
	}
	if changed || vote || config != nil {
		s.sendHeartbeat() // claims, the vote or the configuration changed: tell the peers now
	}
	return changed
}

// candidates is this node's view: itself and every peer heard within two
// failure timeouts, each with its presence.
func (s *loopState) candidates() []Candidate {
	self := Candidate{Name: s.n.cfg.Name, Priority: s.n.cfg.Priority, Ready: s.ready && !s.leaving, VIPs: s.claims()}
	out := []Candidate{self}
	now := time.Now()
	hold := s.n.cfg.StartupHold
	// Waiting for pending peers is for directors starting together; later
	// a crash-looping peer must not hold back takeovers again and again.
	coldStart := now.Sub(s.n.started) < 2*hold
	for _, p := range s.peers {
		// Heard since shortly after its start: ready by since + hold, or
		// it is late (a failure timeout of slack for scheduling).
		pending := coldStart && !p.ready && now.Sub(p.since) < hold+s.n.cfg.FailureTimeout
		c := Candidate{Name: p.name, Priority: p.priority, Pending: pending, VIPs: p.vips}
		switch p.state {
		case peerLive:
			c.Ready = p.ready
		case peerUnsure:
			c.Ready, c.Presence = p.ready, Unsure
		case peerRising:
			c.Presence = Rising
		case peerLingering:
			c.Presence, c.Pending, c.VIPs = Lingering, false, nil
		case peerRestarting:
			// Silent under its restart hold: like a rising director, it
			// owns nothing, but what it claims is not taken from it.
			c.Presence, c.Pending = Rising, false
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// rules are the node's rules with the homes the agent gave (ServeHomes).
func (s *loopState) rules() Rules {
	r := s.n.cfg.Rules
	r.Homes = s.homes
	return r
}

// claims are this node's VIPs, each held while it wants it or its address
// is still on the interface.
func (s *loopState) claims() map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(s.vips))
	for v := range s.vips {
		out[v] = s.want[v] || s.present[v]
	}
	if s.adopting(time.Now()) {
		for v := range s.adopted {
			out[v] = true
		}
	}
	return out
}

func (s *loopState) vipList() []netip.Addr {
	out := slices.Collect(maps.Keys(s.vips))
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// evaluate decides what to hold and publishes it.
func (s *loopState) evaluate() {
	n := s.n
	live := s.candidates()
	vips := s.vipList()
	if s.leaving {
		vips = nil
	}
	s.noteQuorum(len(live))
	st := Next(s.rules(), n.cfg.Name, live, vips)
	s.keepAdopted(st.Hold, time.Now())
	s.logMoves(st, live, vips)
	s.noteWaiting(st.Waiting, live)
	s.noteConflicts(st, live)
	if maps.Equal(st.Hold, s.want) {
		return
	}
	s.want = st.Hold
	n.mu.Lock()
	n.held = maps.Clone(st.Hold)
	n.mu.Unlock()
	select {
	case n.changed <- struct{}{}:
	default:
	}
	s.sendHeartbeat()
}

func (s *loopState) heartbeat(leaving bool) heartbeat {
	n := s.n
	s.seq++
	hb := heartbeat{Name: n.cfg.Name, Addr: n.ml.LocalNode().Address(), Incarnation: n.incarnation, Seq: s.seq,
		Priority: n.cfg.Priority, Ready: s.ready && !s.leaving, Leaving: leaving, Heard: s.guard.echo(time.Now()),
		RestartHold: s.restartHoldLeft(time.Now())}
	if !leaving {
		hb.SharesHealth, hb.Down = s.sharesHealth, s.down
		for v, held := range s.claims() {
			hb.VIPs = append(hb.VIPs, vipClaim{v, held})
		}
		slices.SortFunc(hb.VIPs, func(a, b vipClaim) int { return a.VIP.Compare(b.VIP) })
		hb.Config, hb.ConfigRun = s.configExtensions()
	}
	return hb
}

func (s *loopState) sendHeartbeat() { s.send(s.heartbeat(false)) }

// sendLeaving tells every peer this node is gone (a few times: UDP).
func (s *loopState) sendLeaving() {
	hb := s.heartbeat(true)
	for range 3 {
		s.send(hb)
	}
}

// send sends hb to every target, in the wire versions it reads
// (versionsFor). A failing target (a peer that is down: no neighbour entry)
// is logged when it starts failing, not every time.
func (s *loopState) send(hb heartbeat) {
	var enc encodings
	for _, addr := range s.targets() {
		err := s.sendParts(addr, hb, &enc)
		switch {
		case err != nil && !s.sendFails[addr]:
			s.sendFails[addr] = true
			s.n.log.Debug("cannot send heartbeats", "to", addr, "err", err)
		case err == nil && s.sendFails[addr]:
			delete(s.sendFails, addr)
			s.n.log.Debug("sending heartbeats again", "to", addr)
		}
	}
}

// encodings are one heartbeat's parts by wire version, encoded when first
// needed.
type encodings [hbVersion + 1][][]byte

// sendParts sends hb to addr in every version addr is sent.
func (s *loopState) sendParts(addr string, hb heartbeat, enc *encodings) error {
	for _, v := range s.versionsFor(addr) {
		if enc[v] == nil {
			enc[v] = hb.encodeAs(v, s.n.cfg.Identity)
		}
		for _, p := range enc[v] {
			if err := s.n.ml.SendToAddress(memberlist.Address{Addr: addr}, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// wireVersion is the highest heartbeat version heard from an address in
// the incarnation of its sender heard last.
type wireVersion struct {
	incarnation uint64
	version     byte
	at          time.Time
}

// noteVersion records the version of a heartbeat admitted from hb.Addr.
// A new incarnation starts over: a director downgraded to the release
// before speaks v3 again and must be sent v3 to hear this one at all.
func (s *loopState) noteVersion(hb heartbeat, at time.Time) {
	if hb.Addr == "" {
		return
	}
	w, ok := s.wire[hb.Addr]
	if !ok && len(s.wire) >= maxRemembered {
		return // an address not recorded is sent both versions
	}
	if !ok || w.incarnation != hb.Incarnation {
		w = wireVersion{incarnation: hb.Incarnation}
	}
	if v := max(w.version, hb.Version); v != w.version {
		w.version, s.wireChanged = v, true
	}
	w.at = at
	s.wire[hb.Addr] = w
}

// versionsFor is the heartbeat versions addr is sent: the highest it was
// heard in; both while nothing was heard from it (a director of the
// release before drops v4 with a warning at most every 10 minutes); v4
// only when identities are enforced (v3 carries no signature).
func (s *loopState) versionsFor(addr string) []byte {
	switch w, ok := s.wire[addr]; {
	case s.n.cfg.Identity.Enforced():
		return []byte{hbVersion}
	case ok:
		return []byte{w.version}
	}
	return []byte{hbVersionV3, hbVersion}
}

// syncVersion is the relay message version addr is sent: the version of
// its heartbeats.
func (s *loopState) syncVersion(addr string) byte {
	if v := s.versionsFor(addr); len(v) == 1 {
		return v[0]
	}
	return hbVersionV3
}

// targets are the addresses heartbeats go to: the configured peers, the
// memberlist members and every director heard from, without this node.
// Peers are sent to whether memberlist counts them or not, so a healed
// partition is seen at the next heartbeat.
func (s *loopState) targets() []string {
	n := s.n
	n.mu.Lock()
	out := slices.Clone(n.peerAddrs)
	n.mu.Unlock()
	for _, m := range s.members {
		if m.alive {
			out = append(out, m.addr)
		}
	}
	for _, p := range s.peers {
		if p.state != peerLeft && p.addr != "" {
			out = append(out, p.addr)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(a string) bool { return a == "" || n.self[a] })
}

// startLeaving runs on the loop: stop being a candidate and want nothing.
func (s *loopState) startLeaving() {
	s.leaving = true
	s.n.log.Info("leaving the cluster: releasing every VIP")
}

// housekeep forgets peers silent for long.
func (s *loopState) housekeep() {
	now := time.Now()
	for name, p := range s.peers {
		if !p.state.live() && !s.members[name].alive && (p.state == peerLeft || now.Sub(p.lastHeard) > 10*time.Minute) {
			delete(s.peers, name)
		}
	}
	for addr, w := range s.wire {
		if now.Sub(w.at) > 10*time.Minute {
			delete(s.wire, addr)
		}
	}
}
