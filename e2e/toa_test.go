//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/nat/toa"
)

// TestFullNATClientAddress: FULLNAT services (IPVS masquerading plus lvsd's
// source NAT) in both families, with nat/toa's programs attached by the test
// (lvsd does not configure them yet). From 50 client sources per family the
// real servers' accept() and getpeername() return each client's own address
// and port; before the real servers' programs they return the director's
// source address (the control); a client that sends its own TOA option
// does not spoof; Remove leaves no filter and nothing pinned.
func TestFullNATClientAddress(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(50))
	director := tp.Director(1)
	// 50 sources fit in the client's own /24, so the real servers have no
	// route to 10.1.0.0/16 to take away; they answer the director's source
	// addresses either way.
	type family struct {
		name  string
		vip   netip.AddrPort
		snat  []netip.Addr
		srcs  []netip.Addr
		local []netip.AddrPort // where the connections arrive on the real servers
	}
	families := []family{
		{"IPv4", netip.MustParseAddrPort("10.0.0.50:80"), []netip.Addr{netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.0.201")},
			tp.ClientSources(false), []netip.AddrPort{netip.AddrPortFrom(tp.RS(1).V4, 80), netip.AddrPortFrom(tp.RS(2).V4, 80)}},
		{"IPv6", netip.MustParseAddrPort("[fd00::50]:80"), []netip.Addr{netip.MustParseAddr("fd00::200"), netip.MustParseAddr("fd00::201")},
			tp.ClientSources(true), []netip.AddrPort{netip.AddrPortFrom(tp.RS(1).V6, 80), netip.AddrPortFrom(tp.RS(2).V6, 80)}},
	}
	services := map[string]string{}
	for _, f := range families {
		v6 := f.vip.Addr().Is6()
		services["web"+strings.ToLower(f.name)] = fmt.Sprintf(
			"service: web%s\nvip: %s\nports: [80]\nforwarding: fullnat\nfullnat: {source_addresses: [%s, %s]}\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
			strings.ToLower(f.name), f.vip.Addr(), f.snat[0], f.snat[1], tp.RS(1).Addr(v6), tp.RS(2).Addr(v6))
	}
	echoes := serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	d := newDirector(t, director, services)
	d.start()
	d.waitServices(2, 2)

	ctx := context.Background()
	pinRoot := mountBPFFS(t)
	nsDirector, err := netns.GetFromName(director.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer nsDirector.Close()
	td, err := toa.OpenDirector(ctx, toa.DirectorOptions{Options: toa.Options{PinRoot: pinRoot}, NetNS: nsDirector})
	if err != nil {
		t.Fatal(err)
	}
	defer td.Close()
	if err := td.Attach(ctx, director.Link); err != nil {
		t.Fatal(err)
	}
	if err := td.SetServices(ctx, []netip.AddrPort{families[0].vip, families[1].vip}); err != nil {
		t.Fatal(err)
	}

	// Control: the director adds the option, but without the real server's
	// programs the applications see the director's source address.
	for _, f := range families {
		r, local, err := askTracked(ctx, tp.Client(), f.srcs[0], f.vip)
		if err != nil {
			t.Fatalf("%s control: %v", f.name, err)
		}
		if !contains(f.snat, r.Peer.Addr()) || !contains(f.snat, r.PeerName.Addr()) {
			t.Errorf("%s without the real server's programs: accept %s, getpeername %s; want one of the director's %v (client %s)",
				f.name, r.Peer, r.PeerName, f.snat, local)
		}
	}

	trs, err := toa.OpenRealServer(ctx, toa.Options{PinRoot: pinRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer trs.Close()
	var locals []netip.AddrPort
	var directors []netip.Addr
	for _, f := range families {
		locals = append(locals, f.local...)
		directors = append(directors, f.snat...)
	}
	if err := trs.SetServices(ctx, locals); err != nil {
		t.Fatal(err)
	}
	if err := trs.SetDirectors(ctx, directors); err != nil {
		t.Fatal(err)
	}
	// Every host of the topology is a namespace of this process, so the
	// echo servers' sockets are in this process's cgroup.
	if err := trs.Attach(ctx, ownCgroup(t)); err != nil {
		t.Fatal(err)
	}
	// Listeners keep their SYNs only when opened after the programs.
	for _, s := range echoes {
		if err := s.Stop(echo.TCP, 80); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(echo.TCP, 80); err != nil {
			t.Fatal(err)
		}
	}

	asked := 0
	for _, f := range families {
		for _, src := range f.srcs {
			r, local, err := askTracked(ctx, tp.Client(), src, f.vip)
			asked++
			if err != nil {
				t.Errorf("%s from %s: %v", f.name, src, err)
				continue
			}
			if r.Peer != local || r.PeerName != local {
				t.Errorf("%s from %s via %s: accept %s, getpeername %s; want the client's %s", f.name, src, r.Name, r.Peer, r.PeerName, local)
			}
		}
	}

	// A forged option in the SYN and in the ACK: the director overwrites
	// both, and the server sees the real client.
	dropClientResets(t, tp.Client())
	forged := map[string]netip.AddrPort{"IPv4": netip.MustParseAddrPort("203.0.113.9:1"), "IPv6": netip.MustParseAddrPort("[2001:db8::9]:1")}
	for i, f := range families {
		for _, s := range echoes {
			s.ResetSeen()
		}
		src := netip.AddrPortFrom(f.srcs[len(f.srcs)-1], uint16(45000+i))
		c := newRawTCP(t, tp.Client(), src, f.vip)
		c.handshake(t, toa.Option(forged[f.name]), toa.Option(forged[f.name]))
		if !waitSeen(echoes, src.Addr(), 5*time.Second) {
			t.Errorf("%s: the real servers never saw the forging client %s; saw %v", f.name, src.Addr(), seenAll(echoes))
		}
		if n := seenAll(echoes)[forged[f.name].Addr()]; n != 0 {
			t.Errorf("%s: a client's forged option spoofed %s", f.name, forged[f.name].Addr())
		}
	}

	ds, err := td.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := trs.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("director %+v; real servers %+v", ds, rs)
	if ds.Added < uint64(asked+2) || ds.Stripped < 4 || ds.NoRoom != 0 {
		t.Errorf("director stats %+v: want at least %d added and 4 stripped", ds, asked+2)
	}
	if rs.Stored < uint64(asked) || rs.NotDirector != 0 {
		t.Errorf("real server stats %+v: want at least %d stored", rs, asked)
	}

	if err := trs.Remove(ctx); err != nil {
		t.Error(err)
	}
	if err := td.Remove(ctx); err != nil {
		t.Error(err)
	}
	if out := run(t, director, "tc", "filter", "show", "dev", director.Link, "ingress"); strings.Contains(out, "lvsd_toa") {
		t.Errorf("a filter is left after Remove:\n%s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(pinRoot, "*", "*")); len(left) > 0 {
		t.Errorf("left pinned after Remove: %v", left)
	}
}

func contains(addrs []netip.Addr, a netip.Addr) bool {
	for _, x := range addrs {
		if x == a {
			return true
		}
	}
	return false
}

// mountBPFFS mounts a BPF file system of the test's own and returns a pin
// root in it.
func mountBPFFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting a BPF file system: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return filepath.Join(dir, "lvsd", "toa")
}

// ownCgroup mounts the cgroup v2 hierarchy and returns the folder of this
// process's cgroup in it.
func ownCgroup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mounting cgroup2: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(dir, path)
		}
	}
	return dir // no v2 line: the root cgroup
}

func seenAll(servers map[string]*echo.Server) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for _, s := range servers {
		for a, n := range s.Seen(echo.TCP) {
			out[a] += n
		}
	}
	return out
}

func waitSeen(servers map[string]*echo.Server, a netip.Addr, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if seenAll(servers)[a] > 0 {
			return true
		}
	}
	return false
}
