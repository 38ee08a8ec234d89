package bgp

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// ownRoutesPolicy is the one routing policy the speaker installs. Assigned
// to GoBGP's global RIB in both directions with a default of reject, it
// lets in and out only the paths lvsd added itself (route type local).
const ownRoutesPolicy = "lvsd-own-routes-only"

// globalRIB names GoBGP's global RIB in policy assignments.
const globalRIB = "global"

// hardPrefixFactor: GoBGP closes a session whose router sent more than
// this many times the peer's MaxPrefixes, with a Cease "maximum number of
// prefixes reached". Below it the speaker only warns; above it the routes
// kept in GoBGP's table of received routes would cost real memory (about
// a kilobyte each), and a router sending that many is leaking a table.
const hardPrefixFactor = 100

// prefixLimitRetry is how long a session closed at the hard limit stays
// down before the speaker opens it again: GoBGP alone would keep it down
// for good, and with it this director's routes.
const prefixLimitRetry = time.Minute

// hardPrefixLimit is the count at which GoBGP closes the session.
func hardPrefixLimit(maxPrefixes uint32) uint32 {
	return uint32(min(uint64(maxPrefixes)*hardPrefixFactor, math.MaxUint32))
}

// installPolicy makes GoBGP import nothing its peers send and export
// nothing but the director's own routes. GoBGP runs the global import
// policy on the paths lvsd adds as well, hence the statement that accepts
// local paths. A path a router sent stays in GoBGP's table of what that
// peer sent (bounded by the hard prefix limit) but never reaches the RIB:
// it is never a best path, never sent to another peer and, with GoBGP's
// zebra client never started, never in a kernel routing table. The export
// assignment is a second lock on the same door. It runs before any peer
// is added, so no route arrives before the policy.
func (s *Speaker) installPolicy(ctx context.Context) error {
	err := s.srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: ownRoutesPolicy,
		Statements: []*api.Statement{{
			Name:       ownRoutesPolicy + "-local",
			Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT},
		}}}})
	if err != nil {
		return fmt.Errorf("bgp: defining the routing policy: %w", err)
	}
	for _, dir := range []api.PolicyDirection{api.PolicyDirection_IMPORT, api.PolicyDirection_EXPORT} {
		err := s.srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: globalRIB, Direction: dir, Policies: []*api.Policy{{Name: ownRoutesPolicy}},
			DefaultAction: api.RouteAction_REJECT}})
		if err != nil {
			return fmt.Errorf("bgp: assigning the %s policy: %w", dir, err)
		}
	}
	return nil
}

// peerCounts is what housekeep reads of one peer in GoBGP.
type peerCounts struct {
	adminState api.PeerState_AdminState
	received   uint64 // prefixes in the table of what the peer sent
}

// checkPrefixes warns once per session when a router sent more prefixes
// than its MaxPrefixes (they are refused all the same), and reopens a
// session GoBGP closed at the hard limit once prefixLimitRetry passed.
func (s *Speaker) checkPrefixes(p *peerState, c peerCounts, now time.Time) {
	p.received = c.received
	if c.received > uint64(p.cfg.MaxPrefixes) && !p.prefixWarned && p.state == StateEstablished {
		p.prefixWarned = true
		p.prefixBreaches++
		s.log.Warn(fmt.Sprintf("router %s sent %d prefixes, more than max_prefixes %d: none is imported and the session stays; the router should send this director nothing",
			p.cfg.Address, c.received, p.cfg.MaxPrefixes),
			"peer", p.cfg.Address, "received", c.received, "max_prefixes", p.cfg.MaxPrefixes,
			"hard_limit", hardPrefixLimit(p.cfg.MaxPrefixes))
	}
	if c.adminState != api.PeerState_PFX_CT {
		p.prefixClosedAt = time.Time{}
		return
	}
	if p.prefixClosedAt.IsZero() {
		if p.state == StateEstablished {
			return // the session's end is not handled yet: its reason would replace ours
		}
		// GoBGP reports the end as the notification it sent or as the
		// read that failed when it closed the socket, whichever came first.
		p.prefixClosedAt, p.lastReason = now, fmt.Sprintf("prefix limit: more than %d prefixes", hardPrefixLimit(p.cfg.MaxPrefixes))
		p.prefixBreaches++
		s.log.Error(fmt.Sprintf("BGP session with %s closed: the router sent more than %d prefixes (%d × max_prefixes); this director's routes are withdrawn from it, reopening in %v",
			p.cfg.Address, hardPrefixLimit(p.cfg.MaxPrefixes), hardPrefixFactor, s.cfg.prefixLimitRetry),
			"peer", p.cfg.Address, "max_prefixes", p.cfg.MaxPrefixes, "hard_limit", hardPrefixLimit(p.cfg.MaxPrefixes))
		return
	}
	if now.Sub(p.prefixClosedAt) < s.cfg.prefixLimitRetry {
		return
	}
	if err := s.srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: p.cfg.Address.String()}); err != nil {
		s.log.Error("bgp: cannot reopen the session closed at the prefix limit", "peer", p.cfg.Address, "err", err)
		return
	}
	p.prefixClosedAt, p.downSince, p.hinted = time.Time{}, now, false
	s.log.Info("bgp session reopened after the prefix limit", "peer", p.cfg.Address)
}

// imported counts, per peer, the paths in GoBGP's RIB that the peer sent:
// the policy keeps every count at zero, and status shows it.
func (s *Speaker) imported(ctx context.Context) (map[netip.Addr]uint64, error) {
	out := map[netip.Addr]uint64{}
	for _, f := range []Family{IPv4Unicast, IPv6Unicast} {
		err := s.srv.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: apiFamily(f)},
			func(d *api.Destination) {
				for _, p := range d.GetPaths() {
					// Paths lvsd added have no neighbour ("<nil>").
					if a, err := netip.ParseAddr(p.GetNeighborIp()); err == nil {
						out[a.Unmap()]++
					}
				}
			})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// prefixLimits is the hard limit of every family the peer carries.
func prefixLimits(p PeerConfig, f Family) *api.PrefixLimit {
	return &api.PrefixLimit{Family: apiFamily(f), MaxPrefixes: hardPrefixLimit(p.MaxPrefixes)}
}
