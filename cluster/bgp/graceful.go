package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// Graceful restart (RFC 4724) keeps a director's routes at its routers
// while lvsd restarts and the kernel forwards. Every session advertises the
// capability, with the Forwarding State bit for each family it carries. A
// stop for a planned restart (CloseForRestart) withdraws nothing and sends
// no NOTIFICATION: it shuts the sessions' sockets down (a TCP FIN, as a
// crashed speaker's kernel sends), and a router that helps (FRR does by
// default) marks the director's paths stale and keeps them for the restart
// time. Only then are the BFD sessions taken AdminDown: FRR's bgpd tears an
// established session down, routes and all, when its BFD session goes
// down, but does nothing to one that already waits for a restart.
//
// The next process opens its sessions as the restarting speaker (Restart
// State and Forwarding State bits set) only once its first routes are in
// GoBGP's table, or restartOpenMargin before the restart time runs out:
// GoBGP sends End-of-RIB with its first UPDATEs on a session, and the
// router drops every stale path the End-of-RIB does not follow.
//
// A NOTIFICATION is never a graceful restart here (no RFC 8538 N bit): a
// plain stop's Cease must take the paths away at once.

// GracefulRestart configures the capability.
type GracefulRestart struct {
	Enabled bool
	// RestartTime is how long the routers keep the paths of a director
	// whose sessions closed without a NOTIFICATION, waiting for it to open
	// them again (whole seconds, at most 4095; default 30 s).
	RestartTime time.Duration
}

// Bounds of GracefulRestart.RestartTime.
const (
	DefaultRestartTime = 30 * time.Second
	MaxRestartTime     = 4095 * time.Second // 12 bits in the capability
)

const (
	// restartOpenMargin: a restarting speaker without routes opens its
	// sessions this long before the restart time runs out, counted from
	// its start (the stop was earlier still).
	restartOpenMargin = 5 * time.Second
	// restartDeferral bounds how long GoBGP, restarting, waits for a
	// router's End-of-RIB before it sends its own routes (it imports
	// nothing, so the wait buys nothing).
	restartDeferral = time.Second
	// bfdAfterAbort is the pause between shutting the sessions down and
	// taking BFD AdminDown: the router's bgpd must have seen the sessions
	// close before it hears of BFD going down.
	bfdAfterAbort = 300 * time.Millisecond
)

func (g GracefulRestart) validate() error {
	switch {
	case !g.Enabled:
		return nil
	case g.RestartTime < 0 || g.RestartTime%time.Second != 0:
		return fmt.Errorf("bgp: graceful restart time %v must be whole seconds", g.RestartTime)
	case g.RestartTime > MaxRestartTime:
		return fmt.Errorf("bgp: graceful restart time %v is more than the capability's %v", g.RestartTime, MaxRestartTime)
	}
	return nil
}

// apiGracefulRestart is the capability of a peer; nil when disabled.
// restarting sets the Restart State bit and every family's Forwarding
// State bit (GoBGP sets both from LocalRestarting).
func apiGracefulRestart(g GracefulRestart, restarting bool) *api.GracefulRestart {
	if !g.Enabled {
		return nil
	}
	return &api.GracefulRestart{Enabled: true, RestartTime: uint32(g.RestartTime / time.Second),
		DeferralTime: uint32(restartDeferral / time.Second), LocalRestarting: restarting}
}

// restartOpenDeadline is when a restarting speaker opens its sessions
// even without routes.
func restartOpenDeadline(started time.Time, g GracefulRestart) time.Time {
	return started.Add(max(g.RestartTime-restartOpenMargin, time.Second))
}

// gracefulStatus is the speaker's graceful restart for the status; nil
// while it is off.
func (s *Speaker) gracefulStatus() *GracefulRestartStatus {
	return gracefulStatusOf(s.cfg, s.st.started, s.st.pendingPeers, s.st.openedAt)
}

// gracefulStatusOf is the graceful restart of a speaker of cfg started at
// started; pending: restarting, its sessions are held back still, else
// they opened at openedAt. Nil while graceful restart is off.
func gracefulStatusOf(cfg Config, started time.Time, pending bool, openedAt time.Time) *GracefulRestartStatus {
	g := cfg.GracefulRestart
	if !g.Enabled {
		return nil
	}
	st := &GracefulRestartStatus{RestartTime: g.RestartTime}
	if cfg.Restarting {
		st.Restarted, st.StaleUntil, st.OpenedAt = true, started.Add(g.RestartTime), openedAt
		if pending {
			st.OpenBy = restartOpenDeadline(started, g)
		}
	}
	return st
}

// openPeersAfterRestart adds the peers a restarting speaker held back.
// GoBGP sends the routes in its table, then End-of-RIB, on each session.
func (s *Speaker) openPeersAfterRestart(ctx context.Context, why string) {
	if !s.st.pendingPeers {
		return
	}
	s.st.pendingPeers, s.st.openedAt = false, time.Now()
	var errs []error
	for _, addr := range slices.SortedFunc(maps.Keys(s.st.peers), netip.Addr.Compare) {
		p := s.st.peers[addr]
		p.downSince = time.Now() // the session's absence counts from now
		if err := s.addPeer(ctx, p.cfg, true); err != nil {
			errs = append(errs, err)
		}
	}
	level := s.log.Info
	if why != whyRoutesIn {
		level = s.log.Warn
	}
	level("bgp sessions opened as the restarting speaker", "why", why, "routes", len(s.st.routes),
		"after", time.Since(s.st.started).Round(time.Millisecond).String())
	if err := errors.Join(errs...); err != nil {
		s.log.Error("bgp: opening the sessions after a restart", "err", err)
	}
}

// Reasons a restarting speaker opens its sessions.
const (
	whyRoutesIn = "the first routes are in"
	whyDeadline = "no routes yet and the routers' restart time is running out"
)

// CloseForRestart stops the speaker for a planned restart, leaving its
// routes at the routers: no withdrawal, no NOTIFICATION; the sessions'
// sockets are shut down, the BFD sessions then taken AdminDown, and GoBGP
// stopped. A router with graceful restart keeps the paths for the restart
// time; one without drops them as after a crash. Without GracefulRestart
// it is Close.
func (s *Speaker) CloseForRestart(ctx context.Context) error {
	if !s.cfg.GracefulRestart.Enabled {
		return s.Close(ctx)
	}
	return s.close(ctx, true)
}

// abortSessions shuts down the sockets of the established sessions, so
// the routers see them close without a NOTIFICATION, and waits, bounded by
// ctx and deletedWait, until GoBGP has seen each one go down (then StopBgp
// no longer races with its sessions, see deletePeers, and its Cease has
// no socket left to go out on).
func (s *Speaker) abortSessions(ctx context.Context) error {
	before := map[netip.Addr]int{}
	var shut int
	err := s.do(ctx, func() error {
		s.st.closingForRestart = true
		s.mu.Lock()
		for addr, p := range s.st.peers {
			if p.state == StateEstablished {
				before[addr] = s.downs[addr]
			}
		}
		s.mu.Unlock()
		var err error
		shut, err = shutdownSessions(s.cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("bgp: shutting the sessions down for a restart: %w", err)
	}
	s.log.Info("bgp sessions shut down for a restart: the routes stay at the routers that help", "sockets", shut,
		"established", len(before), "restart_time", s.cfg.GracefulRestart.RestartTime.String())
	return s.waitDown(ctx, before)
}
