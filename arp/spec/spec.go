// Package spec holds the values of package arp that plans are written in:
// a tunnel device and its kind, a GUE receive port, the fallback devices
// of the tunnel modules, and the keys of the per-interface sysctls. It
// computes values from values only, so the pure planner can name what arp
// changes without linking netlink or /proc/sys; arp and arp/sysctl alias
// them for their callers.
package spec

import (
	"fmt"
	"strings"
)

// Link is what a real server needs to know of a device.
type Link struct {
	Name string
	Kind string // rtnetlink's kind: "ipip", "ip6tnl", "gre", "ip6gre", "veth", …
	Up   bool
}

// FouPort is a UDP port on which the kernel unwraps GUE (`ip fou add port
// N gue`, with -6 for IPv6): the inner packet goes on to the tunnel
// device of its protocol (tunl0 for IPv4, ip6tnl0 for IPv6).
type FouPort struct {
	Port uint16
	IPv6 bool
}

func (p FouPort) String() string {
	if p.IPv6 {
		return fmt.Sprintf("gue port %d ipv6", p.Port)
	}
	return fmt.Sprintf("gue port %d", p.Port)
}

// Tunnel device kinds, as rtnetlink names them.
const (
	KindIPIP   = "ipip"   // IPv4-in-IPv4; fallback device tunl0 (module ipip)
	KindIP6IP6 = "ip6tnl" // IPv6-in-IPv6; fallback device ip6tnl0 (module ip6_tunnel)
	KindGRE    = "gre"    // GRE over IPv4; fallback device gre0 (module ip_gre)
	KindGRE6   = "ip6gre" // GRE over IPv6; fallback device ip6gre0 (module ip6_gre)
)

// FallbackDevice is the device a kind's module creates in every namespace,
// which receives every packet of that encapsulation no other tunnel claims.
var FallbackDevice = map[string]string{KindIPIP: "tunl0", KindIP6IP6: "ip6tnl0", KindGRE: "gre0", KindGRE6: "ip6gre0"}

// ConfKey is the IPv4 per-interface sysctl key named param of dev ("all"
// for the setting the kernel combines with every interface's own one):
// ConfKey("eth0", "arp_ignore") is "net/ipv4/conf/eth0/arp_ignore".
func ConfKey(dev, param string) string {
	return "net/ipv4/conf/" + dev + "/" + param
}

// ConfKeyDevice returns the interface of a key made by ConfKey, or "" for
// any other key.
func ConfKeyDevice(key string) string {
	rest, ok := strings.CutPrefix(key, "net/ipv4/conf/")
	if !ok {
		return ""
	}
	dev, _, _ := strings.Cut(rest, "/")
	return dev
}
