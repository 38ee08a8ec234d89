package rules

// Kernel parameters (paths below /proc/sys) a NAT or FULLNAT director needs.
// rules only names them; the agent sets them through its one sysctl writer
// (arp/sysctl) and shows every change in its plan.
const (
	// SysctlForwardV4 and SysctlForwardV6 turn on forwarding: a NAT or
	// FULLNAT director forwards packets between clients and real servers.
	// net.ipv6.conf.all.forwarding also switches every interface to router
	// behaviour: interfaces with accept_ra=1 stop taking router
	// advertisements (use accept_ra=2 where the director needs them).
	SysctlForwardV4 = "net/ipv4/ip_forward"
	SysctlForwardV6 = "net/ipv6/conf/all/forwarding"
	// SysctlIPVSConntrack (net.ipv4.vs.conntrack, for IPv6 too) makes IPVS
	// keep conntrack entries for its connections, which the FULLNAT source
	// NAT rules need (nftables NAT works on conntrack entries). It exists only
	// once the ip_vs module is loaded.
	SysctlIPVSConntrack = "net/ipv4/vs/conntrack"
	// SysctlTCPBeLiberal (net.netfilter.nf_conntrack_tcp_be_liberal) turns
	// TCP window tracking off: conntrack then marks only out-of-window
	// resets invalid. A FULLNAT director under ECMP needs it, since it may
	// see only one direction of a connection (docs/ecmp.md, "FULLNAT").
	SysctlTCPBeLiberal = "net/netfilter/nf_conntrack_tcp_be_liberal"
)

// ForwardingSysctls returns what a NAT or FULLNAT director forwarding IPv4
// (v4) and/or IPv6 (v6) through iface needs: forwarding on and, for IPv4, no
// ICMP redirects. A NAT director often forwards replies out of the interface
// they came in on (one-armed): a redirect would then tell real servers to
// send straight to the client, around the director's reverse NAT, and those
// connections hang. The kernel sends redirects if either "all" or the
// interface allows it, so both are cleared. IPv6 has no such sysctl (table
// ip6 lvsd drops the redirects instead, Spec.DropRedirects6).
func ForwardingSysctls(v4, v6 bool, iface string) map[string]string {
	out := map[string]string{}
	if v4 {
		out[SysctlForwardV4] = "1"
		out["net/ipv4/conf/all/send_redirects"] = "0"
		if iface != "" {
			out["net/ipv4/conf/"+iface+"/send_redirects"] = "0"
		}
	}
	if v6 {
		out[SysctlForwardV6] = "1"
	}
	return out
}

// FullNATSysctls returns what FULLNAT needs besides forwarding.
func FullNATSysctls() map[string]string {
	return map[string]string{SysctlIPVSConntrack: "1"}
}
