package bgp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// peerState is what the Speaker knows of one neighbour; owned by run.
type peerState struct {
	cfg         PeerConfig
	state       SessionState
	since       time.Time
	established time.Time
	flaps       int
	lastFlap    time.Time
	lastReason  string
	downSince   time.Time // start of the current time without a session
	hinted      bool      // the missing session was logged for this outage
	// bfdRunning: a BFD session with the peer exists. It is started
	// when the BGP session is established and stopped when BGP goes down
	// for any reason but ours (see peerEvent).
	bfdRunning bool
	bfd        bfd.State
	bfdDiag    bfd.Diag
	bfdDowns   int       // times BFD went from up to down
	bfdHinted  bool      // BFD not up while established was logged
	bfdWasUp   bool      // BFD came up in this BGP session
	heldDown   bool      // disabled in GoBGP because BFD is down
	holdAt     time.Time // BFD went down: hold BGP then if it is still down
	// received is how many prefixes the router sent (refused all);
	// prefixWarned: this session's breach of MaxPrefixes was logged;
	// prefixBreaches counts breaches (warnings and hard-limit closes);
	// prefixClosedAt is when GoBGP closed the session at the hard limit.
	received       uint64
	prefixWarned   bool
	prefixBreaches int
	prefixClosedAt time.Time
}

// bfdHoldDelay is how long BFD must stay down before the BGP session is
// held down. The router removes the path on its own detection (or on our
// Down) at once; the delay only keeps a short BFD loss, which comes back
// Up within milliseconds (a process not scheduled for a moment, the router
// restarting its session), from also costing a BGP session. Measured in
// the VM under contention: without it, sessions that lost BFD every second
// or two never established again.
const bfdHoldDelay = time.Second

// idleHoldAfterBFD is how long GoBGP waits after a BFD hold-down ends
// before it dials again (its idle hold is 5 s otherwise).
const idleHoldAfterBFD = time.Second

type peerEvent struct {
	addr  netip.Addr
	state SessionState
	at    time.Time
}

var sessionStates = map[api.PeerState_SessionState]SessionState{
	api.PeerState_UNKNOWN: StateUnknown, api.PeerState_IDLE: StateIdle, api.PeerState_CONNECT: StateConnect,
	api.PeerState_ACTIVE: StateActive, api.PeerState_OPENSENT: StateOpenSent,
	api.PeerState_OPENCONFIRM: StateOpenConfirm, api.PeerState_ESTABLISHED: StateEstablished,
}

// onWatch receives GoBGP's peer events (on GoBGP's watcher goroutine).
func (s *Speaker) onWatch(r *api.WatchEventResponse) {
	ev := r.GetPeer()
	if ev == nil || ev.GetType() != api.WatchEventResponse_PeerEvent_STATE {
		return
	}
	addr, err := netip.ParseAddr(ev.GetPeer().GetState().GetNeighborAddress())
	if err != nil {
		return
	}
	st, ok := sessionStates[ev.GetPeer().GetState().GetSessionState()]
	if !ok {
		st = StateUnknown
	}
	s.mu.Lock()
	s.events = append(s.events, peerEvent{addr: addr.Unmap(), state: st, at: time.Now()})
	s.mu.Unlock()
	s.signal()
}

// onBFD receives BFD state changes (on the BFD server's goroutine, which
// must not block).
func (s *Speaker) onBFD(c bfd.Change) {
	s.mu.Lock()
	s.bfdChanges = append(s.bfdChanges, c)
	s.mu.Unlock()
	s.signal()
}

// recordReason keeps the reason GoBGP logged with "Peer Down".
func (s *Speaker) recordReason(peer, reason string) {
	addr, err := netip.ParseAddr(peer)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.reasons[addr.Unmap()] = reason
	s.downs[addr.Unmap()]++
	s.mu.Unlock()
}

func (s *Speaker) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Speaker) handleEvents() {
	s.mu.Lock()
	events, changes := s.events, s.bfdChanges
	s.events, s.bfdChanges = nil, nil
	s.mu.Unlock()
	for _, e := range events {
		s.peerEvent(e)
	}
	for _, c := range changes {
		s.bfdEvent(c)
	}
	s.dueHolds(time.Now())
}

// dueHolds holds the sessions whose BFD stayed down for bfdHoldDelay.
func (s *Speaker) dueHolds(now time.Time) {
	for _, p := range s.st.peers {
		if p.holdAt.IsZero() || now.Before(p.holdAt) {
			continue
		}
		p.holdAt = time.Time{}
		if p.bfdRunning && p.bfd != bfd.Up && !p.heldDown {
			s.hold(p, "BFD down: "+p.bfdDiag.String())
		}
	}
}

func (s *Speaker) peerEvent(e peerEvent) {
	p := s.st.peers[e.addr]
	if p == nil || p.state == e.state {
		return
	}
	old := p.state
	p.state, p.since = e.state, e.at
	switch {
	case e.state == StateEstablished:
		p.established, p.hinted, p.bfdHinted, p.bfdWasUp, p.prefixWarned = e.at, false, false, false, false
		s.log.Info("bgp session established", "peer", e.addr, "peer_asn", p.cfg.ASN)
	case old == StateEstablished:
		s.mu.Lock()
		reason := s.reasons[e.addr]
		s.mu.Unlock()
		switch {
		case p.heldDown:
			reason = fmt.Sprintf("bfd %s (%s); %s", p.bfd, p.bfdDiag, reason)
		case p.bfdRunning && routerBFDDown(reason):
			// The router's BFD failed: handled as ours (keep BFD, hold
			// BGP until it is up); hold and release also bring the
			// session back after 1 s instead of GoBGP's 5 s idle hold.
			p.holdAt = time.Time{}
			s.hold(p, "router: BFD down")
			if p.bfd == bfd.Up {
				s.release(p)
			}
		case s.st.closingForRestart:
			// The router must see the session close before BFD goes
			// down: CloseForRestart takes BFD down after a pause.
		default:
			s.stopBFD(p)
		}
		p.flaps++
		p.lastFlap, p.lastReason, p.established, p.downSince = e.at, reason, time.Time{}, e.at
		s.log.Warn("bgp session down", "peer", e.addr, "reason", reason, "state", string(e.state))
	}
}

// bfdStartDelay is how long after BGP is established the BFD session
// starts (checked every second, so 1-2 s).
const bfdStartDelay = time.Second

// startBFD starts the peer's BFD session once BGP has been established
// for bfdStartDelay, not before: FRR 8.4's bgpd re-creates its BFD session
// for a neighbour when the BGP session comes up (it learns the interface
// then), so a BFD session that came up earlier goes down right after, and
// both sides drop BGP for it (measured, docs/ecmp.md).
func (s *Speaker) startBFD(p *peerState, now time.Time) {
	if !p.cfg.BFD || p.bfdRunning || p.state != StateEstablished || now.Sub(p.established) < bfdStartDelay {
		return
	}
	err := s.cfg.BFD.AddPeer(context.Background(), bfd.PeerConfig{Peer: p.cfg.Address, Local: p.cfg.LocalAddress,
		Interface: p.cfg.Interface, Timers: p.cfg.BFDTimers})
	if err != nil {
		s.log.Error("bgp: cannot start BFD: the session runs unprotected", "peer", p.cfg.Address, "err", err)
		return
	}
	p.bfdRunning, p.bfd, p.bfdDiag = true, bfd.Down, bfd.DiagNone
}

// stopBFD ends the peer's BFD session when BGP went down for another
// reason than BFD (the router restarted, closed the session, the hold
// timer expired): the next established session starts a new one.
func (s *Speaker) stopBFD(p *peerState) {
	if !p.bfdRunning {
		return
	}
	if err := s.cfg.BFD.RemovePeer(context.Background(), p.cfg.Address); err != nil {
		s.log.Debug("bgp: stopping BFD", "peer", p.cfg.Address, "err", err)
	}
	p.bfdRunning, p.holdAt = false, time.Time{}
}

// bfdCoupling is what a BFD change does to the BGP session.
type bfdCoupling int

const (
	bfdNothing  bfdCoupling = iota
	bfdHoldDown             // take the session down after bfdHoldDelay, and keep it down
	bfdRelease              // let it come back
)

// bfdAction decides, as FRR's "neighbor X bfd" does: a session that was Up
// and failed (detection time expired, or the neighbour said Down) takes BGP
// down, once it stayed down for bfdHoldDelay, until BFD is Up again. A
// neighbour going AdminDown is not a failure (RFC 5882 §3.2), nor is our
// own AdminDown (we are stopping). BGP does not wait for a BFD session that
// never came up: a router without BFD for this director still gets its
// routes (status shows BFD down).
func bfdAction(heldDown bool, c bfd.Change) bfdCoupling {
	switch {
	case c.State == bfd.Up && heldDown:
		return bfdRelease
	case c.Old == bfd.Up && c.State == bfd.Down && c.RemoteState != bfd.AdminDown && !heldDown:
		return bfdHoldDown
	}
	return bfdNothing
}

func (s *Speaker) bfdEvent(c bfd.Change) {
	p := s.st.peers[c.Peer]
	if p == nil || !p.bfdRunning {
		return // a late change of a session already stopped
	}
	p.bfd, p.bfdDiag = c.State, c.Diag
	if c.Old == bfd.Up && c.State == bfd.Down {
		p.bfdDowns++
	}
	if c.State == bfd.Up {
		p.holdAt, p.bfdWasUp = time.Time{}, true
	}
	switch bfdAction(p.heldDown, c) {
	case bfdHoldDown:
		if p.holdAt.IsZero() {
			p.holdAt = c.At.Add(bfdHoldDelay)
			time.AfterFunc(time.Until(p.holdAt), s.signal)
		}
	case bfdRelease:
		s.release(p)
	}
}

// routerBFDDown reports whether GoBGP's reason for a session going down
// is a received Cease notification with subcode 10, "BFD Down" (RFC 9384),
// which FRR sends when its BFD session with this director failed. GoBGP
// v3.37.0 does not know the subcode's name.
func routerBFDDown(reason string) bool {
	return strings.Contains(reason, "notification-received code 6(cease) subcode 10(")
}

// hold takes the peer's BGP session down and keeps it down. Reset first:
// it sets GoBGP's idle hold to IdleHoldTimeAfterReset (1 s) for when the
// peer is enabled again; Disable keeps it down.
func (s *Speaker) hold(p *peerState, why string) {
	ctx, addr := context.Background(), p.cfg.Address.String()
	err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr, Communication: why})
	if err == nil {
		err = s.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: addr, Communication: why})
	}
	if err != nil {
		s.log.Error("bgp: cannot hold the session down while BFD is down", "peer", addr, "err", err)
		return
	}
	p.heldDown = true
	s.log.Warn("bgp session held down until BFD is up", "peer", addr, "why", why)
}

// release lets a held session come back.
func (s *Speaker) release(p *peerState) {
	addr := p.cfg.Address.String()
	if err := s.srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: addr}); err != nil {
		s.log.Error("bgp: cannot re-enable the session after BFD came up", "peer", addr, "err", err)
		return
	}
	p.heldDown, p.downSince, p.hinted = false, time.Now(), false
	s.log.Info("bgp session released: BFD is up", "peer", addr)
}

// housekeep runs every second: it starts BFD sessions that are due, puts
// GoBGP's admin state right and says what is missing.
func (s *Speaker) housekeep(now time.Time) {
	if s.st.pendingPeers && !now.Before(s.st.restartDeadline) {
		s.openPeersAfterRestart(context.Background(), whyDeadline)
	}
	counts, err := s.peerCounts()
	if err == nil {
		s.reconcileAdmin(counts)
	}
	for _, addr := range slices.SortedFunc(maps.Keys(s.st.peers), netip.Addr.Compare) {
		p := s.st.peers[addr]
		if c, ok := counts[addr]; ok {
			s.checkPrefixes(p, c, now)
		}
		s.startBFD(p, now)
		s.hintBFD(p, now)
		s.hintMissing(p, now)
	}
}

// reconcileAdmin makes GoBGP's admin state of each peer what the hold-down
// says. GoBGP drops an enable or disable request that arrives while the
// previous one is still pending ("previous setting admin state request is
// still remaining"): a hold and a release in quick succession left a peer
// disabled for good in the VM.
func (s *Speaker) reconcileAdmin(counts map[netip.Addr]peerCounts) {
	ctx := context.Background()
	for addr, c := range counts {
		// A session GoBGP closed at the prefix limit is checkPrefixes'.
		isDown := c.adminState == api.PeerState_DOWN
		p := s.st.peers[addr]
		switch {
		case p == nil || isDown == p.heldDown:
		case isDown:
			s.log.Debug("bgp: enabling a peer GoBGP kept disabled", "peer", addr)
			_ = s.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: addr.String()})
		default:
			s.log.Debug("bgp: disabling a held peer GoBGP kept enabled", "peer", addr)
			_ = s.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: addr.String(), Communication: "BFD down"})
		}
	}
}

// peerCounts reads each peer's admin state and received prefixes.
func (s *Speaker) peerCounts() (map[netip.Addr]peerCounts, error) {
	out := map[netip.Addr]peerCounts{}
	err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		addr, err := netip.ParseAddr(p.GetState().GetNeighborAddress())
		if err != nil {
			return
		}
		c := peerCounts{adminState: p.GetState().GetAdminState()}
		for _, af := range p.GetAfiSafis() {
			c.received += af.GetState().GetReceived()
		}
		out[addr.Unmap()] = c
	})
	return out, err
}

// hintBFD logs once per session when BGP is up but BFD never came up: the
// router does not run BFD for this director. BFD that was up and went down
// is a failure, which the hold-down logs, not a configuration to check.
func (s *Speaker) hintBFD(p *peerState, now time.Time) {
	if p.state != StateEstablished || !p.bfdRunning || p.bfd == bfd.Up || p.bfdHinted || p.bfdWasUp ||
		now.Sub(p.established) < s.cfg.MD5Hint {
		return
	}
	p.bfdHinted = true
	local := "this director's address"
	if p.cfg.LocalAddress.IsValid() {
		local = p.cfg.LocalAddress.String()
	}
	s.log.Warn(fmt.Sprintf("BGP session with %s established for %v but BFD is not up: the router drops this director only after the hold timer; check that it runs BFD for this neighbour (FRR: neighbor %s bfd)",
		p.cfg.Address, now.Sub(p.established).Round(time.Second), local), "peer", p.cfg.Address, "bfd", p.bfd.String())
}

// hintMissing logs once per outage when a session has been missing for
// MD5Hint: with a password mismatch the session just stays in Connect or
// Active and the router logs nothing, but the kernel counts the segments it
// dropped (/proc/net/netstat TcpExt TCPMD5*).
func (s *Speaker) hintMissing(p *peerState, now time.Time) {
	addr := p.cfg.Address
	if p.state == StateEstablished || p.hinted || p.heldDown || s.st.pendingPeers || now.Sub(p.downSince) < s.cfg.MD5Hint {
		return
	}
	p.hinted = true
	failures := s.md5Delta()
	missing := now.Sub(p.downSince).Round(time.Second)
	args := []any{"peer", addr, "state", string(p.state), "for", missing.String(), "tcp_md5_failures", failures}
	switch {
	case failures > 0 && p.cfg.Password != "":
		s.log.Warn(fmt.Sprintf("no BGP session with %s for %v; the kernel counted %d TCP-MD5 failures: check the password",
			addr, missing, failures), args...)
	case failures > 0:
		s.log.Warn(fmt.Sprintf("no BGP session with %s for %v; the kernel counted %d TCP-MD5 failures, and no password is configured for this peer: the router signs with TCP-MD5",
			addr, missing, failures), args...)
	case p.cfg.Password != "":
		s.log.Warn(fmt.Sprintf("no BGP session with %s for %v, and no TCP-MD5 failures counted here: check that the router has this neighbour with the same password, and that it is reachable",
			addr, missing), args...)
	default:
		s.log.Warn(fmt.Sprintf("no BGP session with %s for %v: check that it is reachable and has this director as a neighbour (address, ASN, password)",
			addr, missing), args...)
	}
}

// md5Delta is the kernel's TCP-MD5 failure count since Start, in this
// network namespace.
func (s *Speaker) md5Delta() uint64 {
	n, err := md5Failures(s.cfg.netstat)
	if err != nil || n < s.st.md5Base {
		return 0
	}
	return n - s.st.md5Base
}

// Status returns the speaker's state (see Status).
func (s *Speaker) Status(ctx context.Context) (Status, error) {
	var st Status
	err := s.do(ctx, func() error {
		announced := map[netip.Addr]uint64{}
		err := s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
			addr, err := netip.ParseAddr(p.GetState().GetNeighborAddress())
			if err != nil {
				return
			}
			for _, af := range p.GetAfiSafis() {
				announced[addr.Unmap()] += af.GetState().GetAdvertised()
			}
		})
		if err != nil {
			return err
		}
		imported, err := s.imported(ctx)
		if err != nil {
			return err
		}
		st = s.status(announced, imported)
		return nil
	})
	return st, err
}

func (s *Speaker) status(announced, imported map[netip.Addr]uint64) Status {
	st := Status{ASN: s.cfg.ASN, RouterID: s.cfg.RouterID, MD5Failures: s.md5Delta(),
		ListenAddresses: s.cfg.ListenAddresses, ListenPort: s.cfg.ListenPort, GracefulRestart: s.gracefulStatus()}
	for _, n := range imported {
		st.Imported += n
	}
	for _, addr := range slices.SortedFunc(maps.Keys(s.st.peers), netip.Addr.Compare) {
		p := s.st.peers[addr]
		ps := PeerStatus{Address: addr, ASN: p.cfg.ASN, State: p.state, Since: p.since, Established: p.established,
			Flaps: p.flaps, LastFlap: p.lastFlap, LastFlapReason: p.lastReason, HeldDown: p.heldDown,
			Announced: announced[addr], Received: p.received, Accepted: imported[addr],
			MaxPrefixes: p.cfg.MaxPrefixes, PrefixBreaches: p.prefixBreaches}
		if p.cfg.BFD {
			ps.BFD, ps.BFDDiag = BFDIdle, ""
			if p.bfdRunning {
				ps.BFD, ps.BFDDiag = p.bfd.String(), p.bfdDiag.String()
			}
			ps.BFDDowns = p.bfdDowns
		}
		st.Peers = append(st.Peers, ps)
	}
	for _, p := range slices.SortedFunc(maps.Keys(s.st.routes), netip.Prefix.Compare) {
		st.Routes = append(st.Routes, s.st.routes[p])
	}
	st.markStalePaths(time.Now())
	return st
}
