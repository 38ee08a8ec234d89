package nat

import (
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// BenchmarkFullNATForwarding measures what the FULLNAT tables cost a
// forwarded packet, in the older layout (a rule per service and a SNAT
// rule per ct mark) and with the maps, at 1 and 10,000 services: a raw
// socket in the client's namespace sends UDP packets to the last
// service's port; veth runs the director's whole forwarding path in the
// sender's system call, so ns/op is the cost of one packet. "established"
// repeats one flow (the fullnat chain); "new" gives each packet a new
// source port, so each also creates a conntrack entry and goes through the
// SNAT chain. The real server counts and drops what arrives from the last
// service's SNAT address: fwd/op near 1 says the packets made it.
//
//	sudo go test -run '^$' -bench FullNATForwarding -benchtime 20000x ./nat/
func BenchmarkFullNATForwarding(b *testing.B) {
	if testing.Short() {
		b.Skip("builds network namespaces")
	}
	for _, n := range []int{1, 10000} {
		for _, layout := range []string{"rules", "maps"} {
			b.Run(fmt.Sprintf("%s/%d", layout, n), func(b *testing.B) { benchForwarding(b, layout, n) })
		}
	}
}

func benchForwarding(b *testing.B, layout string, n int) {
	tp := newFullNATTopo(b)
	spec := manyServices(n, l4.UDP)
	switch layout {
	case "rules":
		tp.dir.nftStdin(b, ruleLayout(spec))
	case "maps":
		if err := NewKernel(InNetNS(tp.dir.fd)).Apply(context.Background(), mustRender(b, spec)); err != nil {
			b.Fatal(err)
		}
	}
	last := uint16(10000 + n - 1)
	tp.rs.nftStdin(b, fmt.Sprintf(`table ip sink {
	chain pre {
		type filter hook prerouting priority raw - 10; policy accept;
		ip saddr 10.99.0.101 udp dport %d counter drop
	}
}`, last))
	fd := rawSocket(b, tp.cli)
	defer unix.Close(fd)
	for _, flow := range []string{"established", "new"} {
		b.Run(flow, func(b *testing.B) {
			if out, err := exec.Command("ip", "netns", "exec", tp.dir.name, "conntrack", "-F").CombinedOutput(); err != nil {
				b.Fatalf("conntrack -F: %v\n%s", err, out)
			}
			before := sinkCount(b, tp.rs)
			pkt := udpPacket(last)
			to := &unix.SockaddrInet4{Addr: [4]byte{198, 51, 100, 9}}
			// The thread's CPU time, most of it the forwarding in softirq:
			// what the packets cost, however busy the host's other work
			// keeps the processors (wall time, ns/op, counts that too).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0 := threadCPU(b)
			b.ResetTimer()
			for i := range b.N {
				sport := uint16(40000)
				if flow == "new" {
					sport = uint16(1024 + i%64000) // new up to 64,000 packets
				}
				binary.BigEndian.PutUint16(pkt[20:], sport)
				if err := unix.Sendto(fd, pkt, 0, to); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(sinkCount(b, tp.rs)-before)/float64(b.N), "fwd/op")
		})
	}
}

// threadCPU is the calling thread's user and system time in nanoseconds.
func threadCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func rawSocket(b *testing.B, ns testNS) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(ns.fd)); err != nil {
		b.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err := netns.Set(orig); err != nil {
		panic("cannot return to the original netns: " + err.Error())
	}
	if err != nil {
		b.Fatal(err)
	}
	return fd
}

// udpPacket is an IPv4 UDP packet from the client to the VIP's port dport;
// the kernel fills in the header's length, id and checksum.
func udpPacket(dport uint16) []byte {
	p := make([]byte, 20+8+18)
	p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
	copy(p[12:], []byte{203, 0, 113, 5})
	copy(p[16:], []byte{198, 51, 100, 9})
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint16(p[24:], 8+18)
	return p
}

var sinkRE = regexp.MustCompile(`counter packets (\d+)`)

func sinkCount(b *testing.B, ns testNS) int {
	out, err := exec.Command("ip", "netns", "exec", ns.name, "nft", "list", "table", "ip", "sink").CombinedOutput()
	if err != nil {
		b.Fatalf("nft list table ip sink: %v\n%s", err, out)
	}
	m := sinkRE.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no counter in\n%s", out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}
