package nat

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestRestoredEntriesCarryTraffic checks on this host's kernel (no IPVS:
// the "real server" holds the VIPs itself, so a connection's backend is its
// VIP) that a restored entry is the one the SNAT rule made, whatever the
// order of the restore, and that it carries a reply the server sends first;
// and that the guard rule drops what reaches a SNAT address without an
// entry. Each client port is used twice, towards two VIPs: nf_nat reuses
// the first mapping for the second (find_appropriate_src).
//
//	cli 203.0.113.5-12, 2001:db8:c::5-12 ── dir (lvsd tables, SNAT 10.99.0.100-103, 2001:db8:99::100-103)
//	    ── rs 10.99.0.2, 2001:db8:99::2; VIPs 198.51.100.9-10, 2001:db8:f::9-a on lo
func TestRestoredEntriesCarryTraffic(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	cli, dir, rs := newTestNS(t), newTestNS(t), newTestNS(t)
	cmds := []string{ // the links first
		fmt.Sprintf("link add c0 netns %s type veth peer name d0 netns %s", cli.name, dir.name),
		fmt.Sprintf("link add d1 netns %s type veth peer name r0 netns %s", dir.name, rs.name),
	}
	for i := 5; i < 13; i++ {
		cmds = append(cmds, fmt.Sprintf("-n %s addr add 203.0.113.%d/24 dev c0", cli.name, i),
			fmt.Sprintf("-n %s addr add 2001:db8:c::%d/64 dev c0 nodad", cli.name, i))
	}
	for i := 100; i < 104; i++ {
		cmds = append(cmds, fmt.Sprintf("-n %s addr add 10.99.0.%d/32 dev d1", dir.name, i),
			fmt.Sprintf("-n %s addr add 2001:db8:99::%d/128 dev d1 nodad", dir.name, i))
	}
	for _, c := range []string{"203.0.113.1/24 dev d0", "10.99.0.1/24 dev d1", "2001:db8:c::1/64 dev d0 nodad", "2001:db8:99::1/64 dev d1 nodad"} {
		cmds = append(cmds, "-n "+dir.name+" addr add "+c)
	}
	for _, c := range []string{"10.99.0.2/24 dev r0", "2001:db8:99::2/64 dev r0 nodad", "198.51.100.9/32 dev lo",
		"198.51.100.10/32 dev lo", "2001:db8:f::9/128 dev lo", "2001:db8:f::a/128 dev lo"} {
		cmds = append(cmds, "-n "+rs.name+" addr add "+c)
	}
	for _, c := range []string{cli.name + " link set c0 up", dir.name + " link set d0 up", dir.name + " link set d1 up",
		rs.name + " link set r0 up", rs.name + " link set lo up", cli.name + " link set lo up",
		cli.name + " route add 198.51.100.0/24 via 203.0.113.1", cli.name + " route add 2001:db8:f::/64 via 2001:db8:c::1",
		dir.name + " route add 198.51.100.0/24 via 10.99.0.2", dir.name + " route add 2001:db8:f::/64 via 2001:db8:99::2"} {
		cmds = append(cmds, "-n "+c)
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", strings.Fields(c)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", c, err, out)
		}
	}
	inNS(t, dir, func() {
		setSysctls(t, ForwardingSysctls(true, true, ""))
	})
	var spec Spec
	for _, v := range []string{"198.51.100.9", "198.51.100.10", "2001:db8:f::9", "2001:db8:f::a"} {
		to := addrs("10.99.0.100", "10.99.0.101", "10.99.0.102", "10.99.0.103")
		if addr(v).Is6() {
			to = addrs("2001:db8:99::100", "2001:db8:99::101", "2001:db8:99::102", "2001:db8:99::103")
		}
		spec.SNAT = append(spec.SNAT, SNATRule{Match: Match{VIP: addr(v), Protocol: l4.UDP, Ports: []l4.PortRange{port(53)}},
			CtMark: 0x10, To: to, Comment: "fullnat " + v})
	}
	rset := mustRender(t, spec)
	if err := NewKernel(InNetNS(dir.fd)).Apply(ctx, rset); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct {
		name     string
		client   func(i int) netip.Addr
		vips     [2]netip.AddrPort
		stray    netip.AddrPort
		ctFamily byte
	}{
		{"IPv4", func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(5 + i%8)}) },
			[2]netip.AddrPort{ap("198.51.100.9:53"), ap("198.51.100.10:53")}, ap("10.99.0.100:9"), unix.AF_INET},
		{"IPv6", func(i int) netip.Addr { return addr(fmt.Sprintf("2001:db8:c::%d", 5+i%8)) },
			[2]netip.AddrPort{ap("[2001:db8:f::9]:53"), ap("[2001:db8:f::a]:53")}, ap("[2001:db8:99::100]:9"), unix.AF_INET6},
	} {
		t.Run(fam.name, func(t *testing.T) {
			// 1. The SNAT rule's own choices, for clients spread over the
			// range, each client port used towards both VIPs.
			var socks []*net.UDPConn
			for i := range 16 {
				inNS(t, cli, func() {
					s, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.client(i), uint16(40000+i))))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
					socks = append(socks, s)
					for _, v := range fam.vips {
						if _, err := s.WriteToUDPAddrPort([]byte("hello"), v); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
			// IPv6 neighbour discovery holds the first datagrams for a while.
			var made []dumpedEntry
			for start := time.Now(); len(made) < 2*len(socks) && time.Since(start) < 5*time.Second; {
				time.Sleep(50 * time.Millisecond)
				made = natEntries(t, dir, fam.vips)
			}
			if len(made) != 2*len(socks) {
				t.Fatalf("the SNAT rule made %d entries, want %d: %v", len(made), 2*len(socks), made)
			}

			// 2. Gone (a new owner never had them), and restored from what
			// IPVS would know, in the opposite order.
			flushConntrack(t, dir, fam.ctFamily)
			var es []ConntrackEntry
			for _, d := range slices.Backward(made) {
				e, ok := rset.FullNATEntry(l4.UDP, d.orig[0], d.orig[1], d.reply[0])
				if !ok {
					t.Fatalf("FullNATEntry(%s) found no rule", d)
				}
				es = append(es, e)
			}
			if res, err := NewKernel(InNetNS(dir.fd)).RestoreConntrack(ctx, es); err != nil || res.Created != len(es) {
				t.Fatalf("RestoreConntrack = %+v, %v", res, err)
			}
			restored := natEntries(t, dir, fam.vips)
			spread := map[netip.Addr]int{}
			for _, d := range made {
				i := slices.IndexFunc(restored, func(r dumpedEntry) bool { return r.orig == d.orig })
				if i < 0 || restored[i].reply != d.reply || restored[i].mark != d.mark {
					t.Errorf("the SNAT rule made %s, the restore %v", d, restored)
				}
				spread[d.reply[1].Addr()]++
			}
			t.Logf("SNAT addresses chosen for %d connections: %v", len(made), spread)

			// 3. The server speaks first: its datagram to SNAT:port reaches the client.
			for _, d := range restored {
				inNS(t, rs, func() {
					c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(d.orig[1]), net.UDPAddrFromAddrPort(d.reply[1]))
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					if _, err := c.Write([]byte("tick")); err != nil {
						t.Fatal(err)
					}
				})
				s := socks[slices.IndexFunc(socks, func(s *net.UDPConn) bool {
					return s.LocalAddr().(*net.UDPAddr).AddrPort() == d.orig[0]
				})]
				s.SetReadDeadline(time.Now().Add(5 * time.Second)) // neighbour discovery first
				buf := make([]byte, 16)
				n, from, err := s.ReadFromUDPAddrPort(buf)
				if err != nil || string(buf[:n]) != "tick" || from != d.orig[1] {
					t.Errorf("%s: client read %q from %s, %v; want \"tick\" from the VIP", d, buf[:n], from, err)
				}
			}

			// 4. The guard: a datagram to a SNAT address without an entry is
			// dropped before conntrack confirms an entry for it.
			if strayEntry(t, rs, dir, fam.vips[0], fam.stray) {
				t.Error("a stray datagram to a SNAT address got a confirmed conntrack entry despite the guard")
			}
		})
	}
	// Control: without the guard's chain the local stack takes it, and its
	// entry stays.
	dir.nft(t, "delete", "chain", "ip", TableName, rules.ChainInput)
	if !strayEntry(t, rs, dir, ap("198.51.100.9:53"), ap("10.99.0.100:10")) {
		t.Error("control: without the guard the stray datagram got no entry either; the test proves nothing")
	}
}

// strayEntry sends a datagram from src in rs to to and reports whether dir
// has an entry for it.
func strayEntry(t *testing.T, rs, dir testNS, src, to netip.AddrPort) bool {
	t.Helper()
	inNS(t, rs, func() {
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(src), net.UDPAddrFromAddrPort(to))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("stray"))
	})
	time.Sleep(100 * time.Millisecond)
	return slices.ContainsFunc(dumpConntrack(t, dir.fd), func(d dumpedEntry) bool { return d.orig[1] == to })
}

// natEntries dumps the entries of connections to vips in ns.
func natEntries(t *testing.T, ns testNS, vips [2]netip.AddrPort) []dumpedEntry {
	t.Helper()
	return slices.DeleteFunc(dumpConntrack(t, ns.fd), func(d dumpedEntry) bool { return !slices.Contains(vips[:], d.orig[1]) })
}

// flushConntrack empties the conntrack table of one family in ns
// (IPCTNL_MSG_CT_DELETE without a tuple).
func flushConntrack(t *testing.T, ns testNS, family byte) {
	t.Helper()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: ns.fd})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ipctnlMsgCtDelete = 2
	if _, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysCtnetlink<<8 | ipctnlMsgCtDelete),
			Flags: netlink.Request | netlink.Acknowledge},
		Data: []byte{family, 0, 0, 0},
	}); err != nil {
		t.Fatalf("flushing conntrack: %v", err)
	}
}
