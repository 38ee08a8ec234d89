//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Helpers of the real-server tests: an lvsd agent with role realserver, host
// snapshots, health probes, a packet capture and the return link of the
// rp_filter case.

// newRealServer writes an agent file with role realserver for host (the
// realserver block is indented YAML) into its own folder, apart from the
// director's, with its API socket on the VM's tmpfs. Start it with start.
func newRealServer(t *testing.T, host *topo.Host, realserverBlock string) *lvsd {
	t.Helper()
	base := outDir
	if base == "" {
		base = t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_")+"_"+host.ID)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Unix sockets on 9p are not dependable; /run is the guest's tmpfs.
	if err := os.MkdirAll("/run/lvsd-e2e", 0o755); err != nil {
		t.Fatal(err)
	}
	sock := "/run/lvsd-e2e/" + host.Name + ".sock"
	agentFile := fmt.Sprintf("node: %s\nrole: realserver\nstate_dir: state\napi: {socket: %s}\nlog: {level: debug}\nstrict_modes: false\nrealserver:\n%s",
		host.ID, sock, realserverBlock)
	writeFile(t, filepath.Join(dir, "lvsd.yaml"), agentFile)
	return &lvsd{t: t, host: host, dir: dir, logf: filepath.Join(dir, "lvsd.log")}
}

// config is the path of the agent file, for one-shot subcommands.
func (l *lvsd) config() string { return filepath.Join(l.dir, "lvsd.yaml") }

// waitReady waits until the real-server agent logged the end of its first
// pass (VIPs and sysctls in place) after the mark off.
func (l *lvsd) waitReady(off int) string {
	l.t.Helper()
	return l.waitLog(off, 30*time.Second, "msg=ready")
}

// restart stops the agent and starts a new process on the same folder,
// logging to a new file, and waits until it is ready.
func (l *lvsd) restart(logName string) *lvsd {
	l.t.Helper()
	l.stop()
	r := &lvsd{t: l.t, host: l.host, dir: l.dir, logf: filepath.Join(l.dir, logName)}
	r.start()
	r.waitReady(0)
	return r
}

// loAddrs lists the addresses on the host's lo, in-process.
func loAddrs(t *testing.T, h *topo.Host) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	err := h.Do(func() (err error) {
		out, err = arp.Kernel{}.List(context.Background(), "lo")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hostSnapshot describes what lvsd could change on a host, one line per
// fact: every address of every link (with its flags) and every IPv4 and
// IPv6 conf sysctl of every interface. Two snapshots compare with lineDiff.
func hostSnapshot(t *testing.T, h *topo.Host) string {
	t.Helper()
	var lines []string
	err := h.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			lines = append(lines, fmt.Sprintf("link %s up=%v", l.Attrs().Name, l.Attrs().Flags&net.FlagUp != 0))
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				lines = append(lines, fmt.Sprintf("addr %s %s flags=%#x", l.Attrs().Name, a.IPNet, a.Flags))
			}
		}
		for _, fam := range []string{"ipv4", "ipv6"} {
			root := "/proc/sys/net/" + fam + "/conf"
			devs, err := os.ReadDir(root)
			if err != nil {
				return err
			}
			for _, d := range devs {
				keys, err := os.ReadDir(filepath.Join(root, d.Name()))
				if err != nil {
					return err
				}
				for _, k := range keys {
					b, err := os.ReadFile(filepath.Join(root, d.Name(), k.Name()))
					if err != nil {
						continue // write-only or unset (stable_secret)
					}
					lines = append(lines, fmt.Sprintf("sysctl %s/%s/%s=%s", fam, d.Name(), k.Name(), strings.TrimSpace(string(b))))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %v: %v", h, err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// probeWeight sends GET path to addr from inside host, as a director's
// health check would, and returns the status, the weight header and the body.
func probeWeight(t *testing.T, from *topo.Host, addr netip.AddrPort, path string) (int, string, string) {
	t.Helper()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return from.Dial(ctx, "tcp", netip.Addr{}, addr)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+path, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET %s from %v: %v", addr, from, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), strings.TrimSpace(string(body))
}

// netstat returns a counter of /proc/net/netstat (e.g. TcpExt
// IPReversePathFilter: packets dropped by the reverse-path filter) in the
// host's namespace.
func netstat(t *testing.T, h *topo.Host, group, name string) int {
	t.Helper()
	return procNetCounter(t, h, "netstat", group, name)
}

// procNetCounter returns a counter of /proc/net/<file> (netstat, snmp:
// header and value lines in pairs) in the host's namespace.
func procNetCounter(t *testing.T, h *topo.Host, file, group, name string) int {
	t.Helper()
	var text string
	err := h.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/" + file)
		text = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != group+":" || len(values) != len(names) {
			continue
		}
		if j := slices.Index(names, name); j > 0 {
			n, _ := strconv.Atoi(values[j])
			return n
		}
	}
	t.Fatalf("no %s %s in /proc/net/%s of %v", group, name, file, h)
	return 0
}

// addReturnLink gives rs a second way to the client: a veth pair "ret0"
// between the two namespaces (192.168.77.1/30 on rs, .2 on the client) and
// a route on rs sending replies to src over it. Packets for src then come
// in on rs's eth0 (from the director) but their replies leave through ret0:
// the multi-homed real server for which strict rp_filter drops DR traffic.
func addReturnLink(t *testing.T, rs, client *topo.Host, src netip.Addr) {
	t.Helper()
	clientNS, err := netns.GetFromName(client.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer clientNS.Close()
	err = rs.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "ret0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "ret0", PeerNamespace: netlink.NsFd(int(clientNS))}); err != nil {
			return err
		}
		l, err := netlink.LinkByName("ret0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 168, 77, 1), Mask: net.CIDRMask(30, 32)}}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: src.AsSlice(), Mask: net.CIDRMask(32, 32)},
			Gw: net.IPv4(192, 168, 77, 2)})
	})
	if err != nil {
		t.Fatalf("return link on %v: %v", rs, err)
	}
	err = client.Do(func() error {
		l, err := netlink.LinkByName("ret0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 168, 77, 2), Mask: net.CIDRMask(30, 32)}}); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		t.Fatalf("return link on %v: %v", client, err)
	}
}

// frame is one captured Ethernet frame, decoded as far as the tests need.
type frame struct {
	src  string     // source MAC
	kind string     // arp-request, arp-reply, ns, na, tcp, other
	ip   netip.Addr // ARP sender IP; IPv4/IPv6 source address
	tgt  netip.Addr // ARP target IP; NS/NA target; TCP destination
	port uint16     // TCP source port
}

func (f frame) String() string {
	return fmt.Sprintf("%s from %s ip=%s target=%s port=%d", f.kind, f.src, f.ip, f.tgt, f.port)
}

// capture records every frame that reaches one interface of a host.
type capture struct {
	fd       int
	stopping atomic.Bool
	done     chan struct{}
	once     sync.Once

	mu   sync.Mutex // guards seen
	seen []frame
}

// startCapture opens an AF_PACKET socket on dev inside host (in-process:
// no tcpdump exec under TCG) and records frames until stop.
func startCapture(t *testing.T, host *topo.Host, dev string) *capture {
	t.Helper()
	c := &capture{fd: packetSocket(t, host, dev, unix.SOCK_RAW, unix.ETH_P_ALL), done: make(chan struct{})}
	go c.loop(c.fd)
	t.Cleanup(c.stop)
	return c
}

// packetSocket opens an AF_PACKET socket of type typ (SOCK_RAW: frames,
// SOCK_DGRAM: packets) for proto on dev inside host, with a 4 MiB buffer
// and a 100 ms receive timeout, which bounds how long a reader takes to
// see that it should stop.
func packetSocket(t *testing.T, host *topo.Host, dev string, typ int, proto uint16) int {
	t.Helper()
	fd := -1
	err := host.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, typ|unix.SOCK_CLOEXEC, int(htons(proto))); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: l.Attrs().Index})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Fatalf("capture on %v %s: %v", host, dev, err)
	}
	return fd
}

// loop reads until stop; the receive timeout (100 ms) bounds how long stop
// waits. The socket is closed only after the loop ended, so its number
// cannot be reused under a pending read.
func (c *capture) loop(fd int) {
	defer close(c.done)
	buf := make([]byte, 65536)
	for !c.stopping.Load() {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if f, ok := decode(buf[:n]); ok {
			c.mu.Lock()
			c.seen = append(c.seen, f)
			c.mu.Unlock()
		}
	}
}

// frames returns what was captured so far.
func (c *capture) frames() []frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// stop ends the capture (idempotent).
func (c *capture) stop() {
	c.once.Do(func() {
		c.stopping.Store(true)
		<-c.done
		unix.Close(c.fd)
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// decode reads ARP, ICMPv6 neighbour solicitations/advertisements and TCP
// over IPv4/IPv6 (without extension headers, which the tests don't send).
func decode(b []byte) (frame, bool) {
	if len(b) < 14 {
		return frame{}, false
	}
	f := frame{src: net.HardwareAddr(b[6:12]).String(), kind: "other"}
	p := b[14:]
	switch binary.BigEndian.Uint16(b[12:14]) {
	case unix.ETH_P_ARP:
		if len(p) < 28 || binary.BigEndian.Uint16(p[2:4]) != unix.ETH_P_IP {
			return f, true
		}
		f.kind = map[uint16]string{1: "arp-request", 2: "arp-reply"}[binary.BigEndian.Uint16(p[6:8])]
		f.ip = netip.AddrFrom4([4]byte(p[14:18]))
		f.tgt = netip.AddrFrom4([4]byte(p[24:28]))
	case unix.ETH_P_IP:
		if len(p) < 20 {
			return f, true
		}
		ihl := int(p[0]&0x0f) * 4
		f.ip = netip.AddrFrom4([4]byte(p[12:16]))
		f.tgt = netip.AddrFrom4([4]byte(p[16:20]))
		if p[9] == unix.IPPROTO_TCP && len(p) >= ihl+4 {
			f.kind, f.port = "tcp", binary.BigEndian.Uint16(p[ihl:ihl+2])
		}
	case unix.ETH_P_IPV6:
		if len(p) < 40 {
			return f, true
		}
		f.ip = netip.AddrFrom16([16]byte(p[8:24]))
		f.tgt = netip.AddrFrom16([16]byte(p[24:40]))
		l4 := p[40:]
		switch {
		case p[6] == unix.IPPROTO_TCP && len(l4) >= 2:
			f.kind, f.port = "tcp", binary.BigEndian.Uint16(l4[0:2])
		case p[6] == unix.IPPROTO_ICMPV6 && len(l4) >= 24 && (l4[0] == 135 || l4[0] == 136):
			f.kind = map[byte]string{135: "ns", 136: "na"}[l4[0]]
			f.tgt = netip.AddrFrom16([16]byte(l4[8:24]))
		}
	}
	return f, true
}

// neighbour returns the MAC the host's neighbour table holds for ip on dev
// ("" if none).
func neighbour(t *testing.T, h *topo.Host, dev string, ip netip.Addr) string {
	t.Helper()
	var mac string
	err := h.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		neighs, err := netlink.NeighList(l.Attrs().Index, fam)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && n.HardwareAddr != nil {
				mac = n.HardwareAddr.String()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// forgetNeighbour deletes the host's neighbour entry for ip on dev, so the
// next packet to ip resolves it again.
func forgetNeighbour(t *testing.T, h *topo.Host, dev string, ip netip.Addr) {
	t.Helper()
	err := h.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		err = netlink.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, IP: ip.AsSlice()})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
