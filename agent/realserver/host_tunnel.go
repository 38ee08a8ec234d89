package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/arp"
)

// readDecapsulation fills the tunnel part of a.
func (h Host) readDecapsulation(ctx context.Context, d Desired, rec Record, a *Actual) error {
	names := map[string]bool{}
	for _, l := range d.Tunnel.Links {
		names[l.Name] = true
	}
	for _, l := range rec.Links {
		names[l.Name] = true
	}
	if len(names)+len(d.Tunnel.FouPorts)+len(rec.FouPorts) > 0 && h.Tunnels == nil {
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
	if len(d.Tunnel.FouPorts)+len(rec.FouPorts) > 0 {
		ports, err := h.Tunnels.FouPorts(ctx)
		if err != nil {
			return err
		}
		a.FouPorts = ports
	}
	if d.Tunnel.wantsNAT() || rec.NAT {
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

// intendTunnel records, before any change, what op is about to add; it
// reports whether the record gained an entry (to drop again if op fails).
// A device about to be created counts as created until the kernel says
// it only loaded the module that made it.
func intendTunnel(rec *Record, op Op) bool {
	switch op.Kind {
	case CreateLink:
		return rec.addLink(OwnedLink{Name: op.Link.Name, Kind: op.Link.Kind, Created: true})
	case SetLinkUp:
		return rec.addLink(OwnedLink{Name: op.Link.Name, Kind: op.Link.Kind})
	case AddFouPort:
		return rec.addFou(op.Fou)
	case ReplaceNAT:
		added := !rec.NAT
		rec.NAT = true
		return added
	}
	return false
}

// applyTunnel runs one tunnel op and keeps rec in step; recorded says
// intendTunnel added the op's entry.
func (h Host) applyTunnel(ctx context.Context, op Op, rec *Record, recorded bool) error {
	var err error
	switch op.Kind {
	case CreateLink:
		var created bool
		created, err = h.Tunnels.CreateLink(ctx, op.Link.Name, op.Link.Kind)
		if err == nil && !created {
			// The module's fallback device, new and down: nothing of it is
			// lvsd's (an entry left by a crash before the call included).
			// Bringing it up is recorded when it happens.
			rec.dropLink(op.Link.Name)
		}
	case SetLinkUp:
		err = h.Tunnels.SetUp(ctx, op.Link.Name, true)
	case AddFouPort:
		err = h.Tunnels.AddFouPort(ctx, op.Fou)
	case ReplaceNAT:
		err = h.NAT.Apply(ctx, op.NAT)
	case SetLinkDown, DeleteLink:
		if op.Kind == SetLinkDown {
			err = h.Tunnels.SetUp(ctx, op.Link.Name, false)
		} else {
			err = h.Tunnels.DeleteLink(ctx, op.Link.Name)
		}
		if done(err) {
			rec.dropLink(op.Link.Name)
			return nil
		}
	case DeleteFouPort:
		if err = h.Tunnels.DeleteFouPort(ctx, op.Fou); done(err) {
			rec.dropFou(op.Fou)
			return nil
		}
	case RemoveNAT:
		if err = h.NAT.Remove(ctx); err == nil {
			rec.NAT = false
		}
	case ForgetLink:
		rec.dropLink(op.Link.Name)
	case ForgetFouPort:
		rec.dropFou(op.Fou)
	case ForgetNAT:
		rec.NAT = false
	default:
		return fmt.Errorf("unknown op %v", op.Kind)
	}
	if err != nil && recorded {
		undoIntent(rec, op)
	}
	return err
}

// undoIntent drops the entry intendTunnel added for a failed op.
func undoIntent(rec *Record, op Op) {
	switch op.Kind {
	case CreateLink, SetLinkUp:
		rec.dropLink(op.Link.Name)
	case AddFouPort:
		rec.dropFou(op.Fou)
	case ReplaceNAT:
		rec.NAT = false
	}
}

// done reports whether a removal succeeded or found nothing to remove.
func done(err error) bool { return err == nil || errors.Is(err, arp.ErrNotFound) }
