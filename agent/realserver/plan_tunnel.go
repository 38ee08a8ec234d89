package realserver

import (
	"slices"

	"github.com/lvsd/lvsd/arp/sysctl"
)

// createLinks makes the missing tunnel devices exist.
func createLinks(d Desired, a Actual) []Op {
	var ops []Op
	for _, l := range d.Tunnel.Links {
		if _, ok := a.Links[l.Name]; !ok {
			ops = append(ops, Op{Kind: CreateLink, Link: l, Reason: "decapsulation of tunnel VIPs"})
		}
	}
	return ops
}

// planDecapsulation opens the GUE ports, puts the MSS clamp in place and
// then brings the tunnel devices up. A device comes up only once the Plan
// could read its sysctls (it existed when Actual was read), so that its
// reverse-path filter is loosened first.
func planDecapsulation(d Desired, a Actual) []Op {
	var ops []Op
	for _, p := range d.Tunnel.FouPorts {
		if !slices.Contains(a.FouPorts, p) {
			ops = append(ops, Op{Kind: AddFouPort, Fou: p, Reason: "GUE of tunnel VIPs"})
		}
	}
	if d.Tunnel.wantsNAT() && a.NATDigest != d.Tunnel.NAT.Digest() {
		ops = append(ops, Op{Kind: ReplaceNAT, NAT: d.Tunnel.NAT, Reason: "MSS clamp of tunnel VIPs"})
	}
	for _, l := range d.Tunnel.Links {
		cur, ok := a.Links[l.Name]
		if !ok || cur.Up || !sysctlsRead(d, a, l.Name) {
			continue
		}
		ops = append(ops, Op{Kind: SetLinkUp, Link: l, Reason: "decapsulation of tunnel VIPs"})
	}
	return ops
}

// sysctlsRead reports whether every desired setting of dev was read.
func sysctlsRead(d Desired, a Actual, dev string) bool {
	for _, s := range d.Settings {
		if sysctl.ConfKeyDevice(s.Key) != dev {
			continue
		}
		if _, ok := a.Sysctls[s.Key]; !ok {
			return false
		}
	}
	return true
}

// removeLinks undoes what lvsd did to tunnel devices no longer wanted: one
// it created is deleted, a fallback device it brought up goes down again.
// A device someone else took down or deleted is only forgotten.
func removeLinks(d Desired, a Actual, rec Record) []Op {
	var ops []Op
	for _, l := range rec.Links {
		if slices.ContainsFunc(d.Tunnel.Links, func(w TunnelLink) bool { return w.Name == l.Name }) {
			continue
		}
		cur, ok := a.Links[l.Name]
		link := TunnelLink{Name: l.Name}
		switch {
		case !ok:
			ops = append(ops, Op{Kind: ForgetLink, Link: link, Reason: "deleted by someone else"})
		case l.Created:
			ops = append(ops, Op{Kind: DeleteLink, Link: link, Reason: "no longer needed"})
		case cur.Up:
			ops = append(ops, Op{Kind: SetLinkDown, Link: link, Reason: "no longer needed"})
		default:
			ops = append(ops, Op{Kind: ForgetLink, Link: link, Reason: "taken down by someone else"})
		}
	}
	return ops
}

// removeDecapsulation closes the GUE ports lvsd opened and removes its
// nftables tables when they are no longer wanted.
func removeDecapsulation(d Desired, a Actual, rec Record) []Op {
	var ops []Op
	for _, o := range rec.FouPorts {
		p := o.fou()
		switch {
		case slices.Contains(d.Tunnel.FouPorts, p):
		case slices.Contains(a.FouPorts, p):
			ops = append(ops, Op{Kind: DeleteFouPort, Fou: p, Reason: "no longer needed"})
		default:
			ops = append(ops, Op{Kind: ForgetFouPort, Fou: p, Reason: "closed by someone else"})
		}
	}
	switch {
	case !rec.NAT || d.Tunnel.wantsNAT():
	case a.NATDigest != "":
		ops = append(ops, Op{Kind: RemoveNAT, Reason: "no MSS clamp needed"})
	default:
		ops = append(ops, Op{Kind: ForgetNAT, Reason: "removed by someone else"})
	}
	return ops
}
