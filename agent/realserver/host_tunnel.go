package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
)

// readDecapsulation fills the tunnel part of a.
func (h Host) readDecapsulation(ctx context.Context, d planner.RealServerDesired, owned planner.Ownership, a *planner.RealServerActual) error {
	names := map[string]bool{}
	for _, l := range d.Tunnel.Links {
		names[l.Name] = true
	}
	for _, l := range owned.Links {
		names[l.Name] = true
	}
	if len(names)+len(d.Tunnel.FouPorts)+len(owned.FouPorts) > 0 && h.Tunnels == nil {
		return errors.New("tunnel VIPs need the tunnel devices of the host (no Tunnels given)")
	}
	a.Links = map[string]arp.Link{}
	for name := range names {
		l, err := h.Tunnels.Link(ctx, name)
		switch {
		case errors.Is(err, arp.ErrNotFound):
		case err != nil:
			return err
		default:
			a.Links[name] = l
		}
	}
	if len(d.Tunnel.FouPorts)+len(owned.FouPorts) > 0 {
		ports, err := h.Tunnels.FouPorts(ctx)
		if err != nil {
			return err
		}
		a.FouPorts = ports
	}
	if d.Tunnel.WantsNAT() || owned.NAT {
		if h.NAT == nil {
			return errors.New("the MSS clamp of tunnel VIPs needs nftables (no NAT given)")
		}
		digest, err := h.NAT.Installed(ctx)
		if err != nil {
			return err
		}
		a.NATDigest = digest
	}
	return nil
}

// runTunnel runs one tunnel op. It reports whether the op's object is not
// lvsd's now, to leave the record: removed (or found gone), or made by the
// kernel's module rather than by lvsd.
func (h Host) runTunnel(ctx context.Context, op planner.Op) (gone bool, err error) {
	switch op.Kind {
	case planner.CreateLink:
		var created bool
		created, err = h.Tunnels.CreateLink(ctx, op.Link.Name, op.Link.Kind)
		if err == nil && !created {
			// The module's fallback device, new and down: nothing of it is
			// lvsd's (an entry left by a crash before the call included).
			// Bringing it up is recorded when it happens.
			return true, nil
		}
	case planner.SetLinkUp:
		err = h.Tunnels.SetUp(ctx, op.Link.Name, true)
	case planner.AddFouPort:
		err = h.Tunnels.AddFouPort(ctx, op.Fou)
	case planner.ReplaceNAT:
		err = h.NAT.Apply(ctx, op.NAT)
	case planner.SetLinkDown, planner.DeleteLink:
		if op.Kind == planner.SetLinkDown {
			err = h.Tunnels.SetUp(ctx, op.Link.Name, false)
		} else {
			err = h.Tunnels.DeleteLink(ctx, op.Link.Name)
		}
		if done(err) {
			return true, nil
		}
		return false, err
	case planner.DeleteFouPort:
		if err = h.Tunnels.DeleteFouPort(ctx, op.Fou); done(err) {
			return true, nil
		}
		return false, err
	case planner.RemoveNAT:
		err = h.NAT.Remove(ctx)
		return err == nil, err
	default:
		return false, fmt.Errorf("unknown op %v", op.Kind)
	}
	return false, err
}

// done reports whether a removal succeeded or found nothing to remove.
func done(err error) bool { return err == nil || errors.Is(err, arp.ErrNotFound) }
