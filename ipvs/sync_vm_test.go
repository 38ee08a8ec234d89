//go:build vmtest && linux

package ipvs

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestVMSyncThreshold shows with the kernel's own master daemon why
// RecommendedSyncSysctls: with the kernel defaults a connection that only
// did the handshake is not sent to the backups; with the recommended values
// it is, at once. A local client connects to a DR service whose real server
// is the director itself; a socket joined to 224.0.0.81 on lo reads what the
// master sends.
func TestVMSyncThreshold(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up")
	run(t, "ip", "-n", ns.name, "addr", "add", "10.99.0.100/32", "dev", "lo")
	k := openVM(t, ns.path)
	vip := netip.MustParseAddr("10.99.0.100")
	key := ServiceKey{Protocol: l4.TCP, Addr: vip, Port: 80}
	if err := k.AddService(ctx, Service{ServiceKey: key, Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	dst := Destination{DestinationKey: DestinationKey{Addr: vip, Port: 80}, Weight: 1, Forwarding: DirectRoute}
	if err := k.AddDestination(ctx, key, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := k.StartDaemon(ctx, Daemon{State: DaemonMaster, Interface: "lo", SyncID: 42}); err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	var mc *net.UDPConn
	var err error
	ns.in(t, func() {
		if ln, err = net.Listen("tcp4", "10.99.0.100:80"); err != nil {
			return
		}
		var lo *net.Interface
		if lo, err = net.InterfaceByName("lo"); err != nil {
			return
		}
		mc, err = net.ListenMulticastUDP("udp4", lo, &net.UDPAddr{IP: net.IPv4(224, 0, 0, 81), Port: 8848})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	var mu sync.Mutex
	var conns []net.Conn // both ends stay open: no FIN, no state change to send
	defer func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	dial := func() (net.Conn, uint16) {
		t.Helper()
		var c net.Conn
		ns.in(t, func() { c, err = net.Dial("tcp4", "10.99.0.100:80") })
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c, uint16(c.LocalAddr().(*net.TCPAddr).Port)
	}

	// Kernel defaults, sync_threshold "3 50": client packets 3, 53, ... are
	// sent. The handshake has two: nothing within the 2 s flush time + 1 s.
	c1, port1 := dial()
	if r, ok := readSync(t, mc, port1, 4*time.Second); ok {
		t.Fatalf("handshake-only connection sent with the kernel defaults: %v", r)
	}
	if _, err := c1.Write([]byte("x")); err != nil { // the third client packet
		t.Fatal(err)
	}
	if _, ok := readSync(t, mc, port1, 5*time.Second); !ok {
		t.Fatal("connection not sent after its third client packet")
	}

	ns.in(t, func() {
		for k, v := range RecommendedSyncSysctls().Sysctls() {
			if err == nil {
				err = os.WriteFile("/proc/sys/"+k, []byte(v+"\n"), 0o644)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, port2 := dial()
	r, ok := readSync(t, mc, port2, 5*time.Second)
	if !ok {
		t.Fatal("handshake-only connection not sent with RecommendedSyncSysctls")
	}
	t.Logf("handshake-only connection sent after %v: %v", time.Since(start).Round(time.Millisecond), r)
	const tcpEstablished = 1 // IP_VS_TCP_S_ESTABLISHED
	if r.state != tcpEstablished || r.vaddr != vip || r.vport != 80 || r.timeout != 900 {
		t.Errorf("record %v: want ESTABLISHED to %s:80 with timeout 900 s", r, vip)
	}
}

// syncRecord is an IPv4 connection of a sync message, protocol v1.
type syncRecord struct {
	proto               uint8
	flags               uint32
	state               uint16
	cport, vport, dport uint16
	timeout             uint32
	caddr, vaddr, daddr netip.Addr
}

func (r syncRecord) String() string {
	return fmt.Sprintf("proto %d state %d flags %#x %s -> %s -> %s timeout %ds", r.proto, r.state, r.flags,
		netip.AddrPortFrom(r.caddr, r.cport), netip.AddrPortFrom(r.vaddr, r.vport), netip.AddrPortFrom(r.daddr, r.dport), r.timeout)
}

// readSync reads sync messages for up to d and returns the record of the
// connection from client port cport.
func readSync(t *testing.T, mc *net.UDPConn, cport uint16, d time.Duration) (syncRecord, bool) {
	t.Helper()
	mc.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 65536)
	for {
		n, _, err := mc.ReadFromUDP(buf)
		if err != nil {
			return syncRecord{}, false // deadline
		}
		m := buf[:n]
		// Header: reserved 0, syncid, size, connection count, version 1, spare.
		if n < 8 || m[0] != 0 || m[1] != 42 || int(binary.BigEndian.Uint16(m[2:])) != n || m[5] != 1 {
			t.Fatalf("not a v1 sync message of syncid 42: %x", m)
		}
		p := m[8:]
		for range int(m[4]) {
			size := int(binary.BigEndian.Uint16(p[2:]) & 0x0fff)
			if p[0] != 0 || size < 36 || size > len(p) {
				t.Fatalf("not an IPv4 sync record: %x", p)
			}
			r := syncRecord{proto: p[1], flags: binary.BigEndian.Uint32(p[4:]), state: binary.BigEndian.Uint16(p[8:]),
				cport: binary.BigEndian.Uint16(p[10:]), vport: binary.BigEndian.Uint16(p[12:]),
				dport: binary.BigEndian.Uint16(p[14:]), timeout: binary.BigEndian.Uint32(p[20:]),
				caddr: netip.AddrFrom4([4]byte(p[24:28])), vaddr: netip.AddrFrom4([4]byte(p[28:32])),
				daddr: netip.AddrFrom4([4]byte(p[32:36]))}
			if r.proto == 6 && r.cport == cport {
				return r, true
			}
			p = p[min((size+3)&^3, len(p)):]
		}
	}
}
