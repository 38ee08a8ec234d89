package keepalived

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/importer"
)

// ClusterVRRP is ConvertOptions.Cluster for cluster.mode vrrp: the
// director speaks VRRP version 3 beside keepalived, so that a pair moves
// one director at a time (docs/migrating-from-keepalived.md).
const ClusterVRRP = "vrrp"

// lvsd's VRRP bounds (agent/config/vrrp.go, RFC 5798).
const (
	vrrpCentisecond   = 10 * time.Millisecond
	maxVRRPAdvertInt  = 4095 * vrrpCentisecond
	maxVRRPPriority   = 254 // 255 is the address owner, which lvsd never is
	keepalivedVersion = 2   // keepalived's vrrp_version when none is given
)

// vrrpInstance is what mode vrrp takes from one vrrp_instance: the
// settings a virtual router of lvsd must share with keepalived's.
type vrrpInstance struct {
	vrid      int // 0: none or not 1-255
	priority  int
	advert    time.Duration
	preempt   bool
	iface     string
	version   int  // 0: not given in the instance
	ipv6      bool // the family of its first virtual_ipaddress
	versionAt string
}

// vrrpMode is mode vrrp's state over the conversion: the global
// vrrp_version and the instances mapped so far, one per address family.
type vrrpMode struct {
	version   int    // global_defs vrrp_version, 0: not given
	versionAt string // where it was given
	first     *vrrpInstance
	families  map[bool]*Node // ipv6 -> the instance mapped for that family
}

// readVRRPInstance reads the settings of n without reporting them; a value
// keepalived would refuse is left at its zero value (vrid) or default.
func readVRRPInstance(n *Node) vrrpInstance {
	v := vrrpInstance{priority: 100, advert: time.Second, preempt: true}
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "virtual_router_id":
			v.vrid, _ = argInt(ch, 0, 1, 255)
		case "priority":
			if p, ok := argInt(ch, 0, 1, 255); ok {
				v.priority = min(p, maxVRRPPriority)
			}
		case "advert_int":
			if d, ok := seconds(strings.Join(ch.Args, "")); ok && d > 0 {
				v.advert = vrrpAdvert(d)
			}
		case "nopreempt":
			v.preempt = false
		case "interface":
			if len(ch.Args) == 1 {
				v.iface = ch.Args[0]
			}
		case "version":
			if len(ch.Args) == 1 {
				v.version, _ = strconv.Atoi(ch.Args[0])
				v.versionAt = ch.Where()
			}
		case "virtual_ipaddress":
			if len(ch.Children) > 0 {
				addr, err := netip.ParseAddr(strings.SplitN(ch.Children[0].Keyword, "/", 2)[0])
				v.ipv6 = err == nil && addr.Unmap().Is6()
			}
		}
	}
	return v
}

// vrrpAdvert is keepalived's advert_int d as VRRP version 3 carries it:
// whole centiseconds, 10ms-40.95s.
func vrrpAdvert(d time.Duration) time.Duration {
	return min(max(d.Round(vrrpCentisecond), vrrpCentisecond), maxVRRPAdvertInt)
}

// sameRouter says how an instance differs from the first one in what one
// vrrp block holds ("": it does not).
func (v vrrpInstance) sameRouter(first vrrpInstance) string {
	switch {
	case v.vrid != first.vrid:
		return fmt.Sprintf("virtual_router_id %d, not %d", v.vrid, first.vrid)
	case v.priority != first.priority:
		return fmt.Sprintf("priority %d, not %d", v.priority, first.priority)
	case v.advert != first.advert:
		return fmt.Sprintf("advert_int %s, not %s", importer.Duration(v.advert), importer.Duration(first.advert))
	case v.preempt != first.preempt:
		return "another nopreempt"
	case v.iface != "" && v.iface != first.iface:
		return fmt.Sprintf("interface %s, not %s", v.iface, first.iface)
	}
	return ""
}

func family(ipv6 bool) string {
	if ipv6 {
		return "IPv6"
	}
	return "IPv4"
}

// vrrpModeInstance maps a vrrp_instance in mode vrrp: lvsd runs one
// virtual router per address family, all with the settings of the vrrp
// block, so the first instance with a virtual_router_id gives them and a
// second one is mapped only for the other family with the same settings.
func (c *converter) vrrpModeInstance(n *Node, a *agentSettings) {
	m := &c.vrrp
	v := readVRRPInstance(n)
	switch {
	case v.vrid == 0:
		c.notMapped(n, "no virtual_router_id in 1-255: keepalived does not run this instance either")
		c.skipped(n.Children)
		return
	case m.first == nil:
		if v.iface == "" {
			v.iface = a.iface
		}
		m.first, m.families = &v, map[bool]*Node{v.ipv6: n}
		a.cluster = true
		c.note(n, c.versionOutcome(v), "cluster.mode: vrrp, virtual router %d: lvsd speaks VRRP version 3 beside keepalived until the switch to its own cluster%s", v.vrid, c.versionAdvice(v))
	case m.families[v.ipv6] != nil:
		c.notMapped(n, "lvsd runs one %s virtual router, the one of vrrp_instance at %s: the services' %s VIPs are all its addresses, so keepalived's instance for the move must list them all", family(v.ipv6), m.families[v.ipv6].Where(), family(v.ipv6))
		c.skipped(n.Children)
		return
	default:
		if diff := v.sameRouter(*m.first); diff != "" {
			c.notMapped(n, "lvsd's %s virtual router has the settings of the first vrrp_instance, and this one has %s: give keepalived's instances the same settings, or move the %s VIPs separately", family(v.ipv6), diff, family(v.ipv6))
			c.skipped(n.Children)
			return
		}
		m.families[v.ipv6] = n
		c.note(n, c.versionOutcome(v), "lvsd's %s virtual router %d, with the settings of cluster.vrrp%s", family(v.ipv6), v.vrid, c.versionAdvice(v))
	}
	first := c.vrrp.first.ipv6 == v.ipv6
	for _, ch := range n.Children {
		c.vrrpModeKeyword(ch, v, first, a)
	}
}

// versionOutcome: an instance keepalived runs in VRRP version 2 does not
// hear lvsd, nor lvsd it.
func (c *converter) versionOutcome(v vrrpInstance) importer.Outcome {
	if c.instanceVersion(v) == 3 {
		return importer.Mapped
	}
	return importer.Approximated
}

func (c *converter) instanceVersion(v vrrpInstance) int {
	switch {
	case v.version != 0:
		return v.version
	case c.vrrp.version != 0:
		return c.vrrp.version
	}
	return keepalivedVersion
}

func (c *converter) versionAdvice(v vrrpInstance) string {
	if c.instanceVersion(v) == 3 {
		return ""
	}
	why := "keepalived's default"
	switch {
	case v.version != 0:
		why = "version at " + v.versionAt
	case c.vrrp.version != 0:
		why = "vrrp_version at " + c.vrrp.versionAt
	}
	return fmt.Sprintf("; keepalived runs this instance in VRRP version %d (%s), which lvsd does not speak: set vrrp_version 3 in global_defs (or version 3 in the instance) on the keepalived director and restart it before lvsd starts beside it", c.instanceVersion(v), why)
}

// vrrpModeKeyword maps a statement of a mapped vrrp_instance in mode vrrp.
// first: n is the first instance, which gives the agent's interface.
func (c *converter) vrrpModeKeyword(ch *Node, v vrrpInstance, first bool, a *agentSettings) {
	arg := strings.Join(ch.Args, " ")
	switch ch.Keyword {
	case "interface":
		if first {
			a.iface, a.ifaceFrom = arg, ch.Where()
		}
		c.mapped(ch, "interface: %s (it holds the VIPs and carries the VRRP advertisements)", arg)
	case "state":
		if arg == "MASTER" {
			c.approx(ch, "lvsd starts as backup and becomes master after the master down interval unless it hears a master it yields to (RFC 5798)")
		} else {
			c.mapped(ch, "lvsd starts as backup")
		}
	case "virtual_router_id":
		c.mapped(ch, "cluster.vrrp.virtual_router_id: %d", v.vrid)
	case "priority":
		switch p, ok := argInt(ch, 0, 1, 255); {
		case !ok:
			c.notMapped(ch, "%q is not a priority (1-255)", arg)
		case p == 255:
			c.approx(ch, "cluster.vrrp.priority: %d: 255 is for the owner of the addresses, which lvsd never is; give the other director a lower priority", maxVRRPPriority)
		default:
			c.mapped(ch, "cluster.vrrp.priority: %d", p)
		}
	case "nopreempt":
		c.mapped(ch, "cluster.vrrp.preempt: false")
	case "advert_int":
		d, ok := seconds(arg)
		switch {
		case !ok || d <= 0:
			c.notMapped(ch, "%q is not a time in seconds", arg)
		case d != v.advert:
			c.approx(ch, "cluster.vrrp.advert_int: %s: VRRP version 3 counts whole centiseconds from 10ms to 40.95s", importer.Duration(v.advert))
		default:
			c.mapped(ch, "cluster.vrrp.advert_int: %s", importer.Duration(v.advert))
		}
	case "version":
		if c.instanceVersion(v) == 3 {
			c.mapped(ch, "lvsd speaks VRRP version 3")
		} else {
			c.notMapped(ch, "lvsd speaks only VRRP version 3: set version 3 here on the keepalived director and restart it before lvsd starts beside it")
		}
	case "authentication":
		c.notMapped(ch, "VRRP version 3 has no authentication; keepalived ignores it in version 3")
		c.skipped(ch.Children)
	case "unicast_peer":
		c.notMapped(ch, "lvsd sends its VRRP advertisements to the multicast group only (224.0.0.18, ff02::12): remove unicast_peer from keepalived's instance for the move, so that it sends there too")
		c.skipped(ch.Children)
	case "unicast_src_ip", "mcast_src_ip":
		c.notMapped(ch, "lvsd's advertisements leave from the interface's first address that is not a VIP")
	case "virtual_ipaddress":
		c.virtualIPs(ch)
	case "virtual_ipaddress_excluded":
		c.virtualIPs(ch)
		c.approx(ch, "lvsd advertises every VIP of its services, keepalived does not advertise excluded addresses: lvsd logs the difference once and still follows keepalived's master")
	default:
		c.instanceCommon(ch, a)
	}
}

// vrrpModeGlobal reads global_defs' vrrp_version before the instances
// that use it.
func (c *converter) vrrpModeGlobal(nodes []*Node) {
	for _, n := range nodes {
		if n.Keyword != "global_defs" {
			continue
		}
		if v := child(n, "vrrp_version"); v != nil {
			if ver, ok := argInt(v, 0, 2, 3); ok {
				c.vrrp.version, c.vrrp.versionAt = ver, v.Where()
			}
		}
	}
}

// vrrpVersionGlobal reports global_defs' vrrp_version in mode vrrp.
func (c *converter) vrrpVersionGlobal(n *Node) {
	switch v, _ := argInt(n, 0, 2, 3); v {
	case 3:
		c.mapped(n, "lvsd speaks VRRP version 3")
	case 2:
		c.notMapped(n, "lvsd speaks only VRRP version 3: set vrrp_version 3 on the keepalived director and restart it before lvsd starts beside it")
	default:
		c.notMapped(n, "%q is not 2 or 3", strings.Join(n.Args, " "))
	}
}

// renderVRRP writes the cluster block of mode vrrp.
func (c *converter) renderVRRP(w *importer.Writer, a agentSettings) {
	v := c.vrrp.first
	w.Key(0, "cluster", "", "")
	w.Key(2, "mode", "vrrp", "VRRP version 3 beside keepalived during the move")
	w.Key(2, "vrrp", "", "")
	w.Key(4, "virtual_router_id", strconv.Itoa(v.vrid), "keepalived's virtual_router_id")
	w.Key(4, "priority", strconv.Itoa(v.priority), "keepalived's priority: set each director's own")
	w.Key(4, "advert_int", importer.Duration(v.advert), "keepalived's advert_int")
	if !v.preempt {
		w.Key(4, "preempt", "false", "keepalived's nopreempt")
	}
	if v.iface != "" && v.iface != a.iface {
		w.Key(4, "interface", importer.Text(v.iface), "keepalived's interface")
	}
	w.Comment(2, "After the move, the switch to lvsd's own cluster: mode active-standby, key_file, peers and\npriority in place of vrrp (docs/migrating-from-keepalived.md).")
}

// vrrpAddressAdvice adds to the report of a virtual_ipaddress no service
// uses what it means in mode vrrp.
func (c *converter) vrrpAddressAdvice() string {
	if c.opt.Cluster != ClusterVRRP {
		return ""
	}
	return "; keepalived's advertisements list it and lvsd's do not (lvsd logs the difference once and still follows keepalived's master)"
}
