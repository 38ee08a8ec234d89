package topo

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// readyTimeout bounds the waits below; generous because qemu/TCG is slow.
const readyTimeout = 10 * time.Second

// waitReady waits until every host can talk at once. Measured on this
// setup, a packet sent right after creation was occasionally lost, costing
// a 1 s ARP/ND/SYN retransmit, because several steps finish asynchronously
// in the kernel after the veth gets carrier or an address is added:
//   - the bridge enables the new port (linkwatch work): until then floods
//     (ARP requests) skip it;
//   - IPv6 finishes each address in the addrconf work, even with NODAD: it
//     joins the solicited-node multicast group (until then neighbour
//     solicitations are dropped) and inserts the local route (until then
//     packets to the address are not delivered).
func waitReady(hosts ...*Host) error {
	deadline := time.Now().Add(readyTimeout)
	for _, h := range hosts {
		if err := poll(deadline, h, h.ready); err != nil {
			return err
		}
	}
	return nil
}

// poll calls check until it reports ok or the deadline passes.
func poll(deadline time.Time, h *Host, check func() (bool, string)) error {
	for {
		ok, why := check()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%v not ready after %v: %s", h, readyTimeout, why)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *Host) ready() (bool, string) { return h.linkReady(h.Port, h.Link) }

// readyDeadline is when a wait that starts now gives up.
func readyDeadline() time.Time { return time.Now().Add(readyTimeout) }

// linkReady reports whether dev, plugged into a bridge through port, can
// talk: the port forwards, dev is up and its IPv6 addresses are usable.
func (h *Host) linkReady(port, dev string) (bool, string) {
	// Bridge port state 3 is BR_STATE_FORWARDING. The netlink library does
	// not decode IFLA_BRPORT_STATE; sysfs has it, and /sys shows the
	// namespace the process started in, where the bridge lives.
	b, err := os.ReadFile("/sys/class/net/" + port + "/brport/state")
	if err != nil {
		return false, err.Error()
	}
	if st := strings.TrimSpace(string(b)); st != "3" {
		return false, "bridge port state " + st
	}
	l, err := h.nl.LinkByName(dev)
	if err != nil {
		return false, err.Error()
	}
	if st := l.Attrs().OperState; st != netlink.OperUp {
		return false, dev + " is " + st.String()
	}
	addrs, err := h.nl.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return false, err.Error()
	}
	var want []netip.Addr
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			return false, a.IP.String() + " tentative"
		}
		ip, _ := netip.AddrFromSlice(a.IP)
		want = append(want, ip)
	}
	return h.usable6(dev, true, want)
}

// waitUsable6 waits until the IPv6 addrs on dev are usable; nd tells
// whether dev does neighbour discovery (not lo).
func (h *Host) waitUsable6(dev string, nd bool, addrs ...netip.Addr) error {
	return poll(time.Now().Add(readyTimeout), h, func() (bool, string) { return h.usable6(dev, nd, addrs) })
}

// usable6 reports whether the kernel finished setting up the IPv6 addrs:
// local route present and, with nd, solicited-node group joined.
func (h *Host) usable6(dev string, nd bool, addrs []netip.Addr) (bool, string) {
	for _, a := range addrs {
		routes, err := h.nl.RouteGet(a.AsSlice())
		if err != nil || len(routes) == 0 || routes[0].Type != unix.RTN_LOCAL {
			return false, "no local route yet for " + a.String()
		}
	}
	if !nd {
		return true, ""
	}
	return h.joined(dev, addrs)
}

// joined reports whether dev is a member of the solicited-node multicast
// group of every address.
func (h *Host) joined(dev string, addrs []netip.Addr) (bool, string) {
	var table []byte
	err := h.Do(func() (err error) {
		// thread-self, not self: /proc/self/net is the namespace of the
		// process's main thread, not of this thread.
		table, err = os.ReadFile("/proc/thread-self/net/igmp6")
		return err
	})
	if err != nil {
		return false, err.Error()
	}
	groups := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == dev {
			groups[f[2]] = true
		}
	}
	for _, a := range addrs {
		b := a.As16()
		g := fmt.Sprintf("ff0200000000000000000001ff%02x%02x%02x", b[13], b[14], b[15])
		if !groups[g] {
			return false, dev + " has not joined the solicited-node group of " + a.String()
		}
	}
	return true, ""
}
