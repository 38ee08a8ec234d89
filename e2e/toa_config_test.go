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

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/nat/toa"
)

// TestFullNATClientAddressByConfig: what TestFullNATClientAddress proves with
// programs the test attaches, lvsd does from its files. The director's
// services say client_address: toa; one real-server agent's
// realserver.client_address block covers both real servers (every host of the
// topology is a namespace of one VM, so the programs on the test's cgroup
// serve both). From 50 client sources per family, through real IPVS FULLNAT,
// accept() and getpeername() return each client's own address and port;
// before the real-server agent they return the director's source address (the
// control). lvsd status shows the director's program and its counters. A
// reload without client_address removes the director's program; `lvsd
// cleanup` on the stopped director and real server removes what they left:
// nothing is left pinned, on any interface.
func TestFullNATClientAddressByConfig(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(50))
	director := tp.Director(1)
	// 50 sources fit in the client's own /24, so the real servers have no
	// route to 10.1.0.0/16 to take away; they answer the director's source
	// addresses either way.
	pinned := systemBPFFS(t)
	type family struct {
		name  string
		vip   netip.AddrPort
		snat  []netip.Addr
		srcs  []netip.Addr
		local []netip.AddrPort
	}
	families := []family{
		{"ipv4", netip.MustParseAddrPort("10.0.0.50:80"), []netip.Addr{netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.0.201")},
			tp.ClientSources(false), []netip.AddrPort{netip.AddrPortFrom(tp.RS(1).V4, 80), netip.AddrPortFrom(tp.RS(2).V4, 80)}},
		{"ipv6", netip.MustParseAddrPort("[fd00::50]:80"), []netip.Addr{netip.MustParseAddr("fd00::200"), netip.MustParseAddr("fd00::201")},
			tp.ClientSources(true), []netip.AddrPort{netip.AddrPortFrom(tp.RS(1).V6, 80), netip.AddrPortFrom(tp.RS(2).V6, 80)}},
	}
	service := func(f family, clientAddress string) string {
		v6 := f.vip.Addr().Is6()
		return fmt.Sprintf("service: web%s\nvip: %s\nports: [80]\nforwarding: fullnat\n%sfullnat: {source_addresses: [%s, %s]}\n"+
			"backends:\n  - {address: %s}\n  - {address: %s}\n",
			f.name, f.vip.Addr(), clientAddress, f.snat[0], f.snat[1], tp.RS(1).Addr(v6), tp.RS(2).Addr(v6))
	}
	services := map[string]string{}
	for _, f := range families {
		services["web"+f.name] = service(f, "client_address: toa\n")
	}
	echoes := serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	d := newDirector(t, director, services)
	d.start()
	d.waitServices(2, 2)
	waitFor(t, 15*time.Second, "the director's TOA program on "+director.Link+" with 2 VIP:ports, in lvsd status and in tc", func() bool {
		out, _ := director.Run(context.Background(), "tc", "filter", "show", "dev", director.Link, "ingress")
		st := statusPart[toaStatus](t, director, "toa")
		return strings.Contains(out, "lvsd_toa") && len(st.Interfaces) == 1 && st.Interfaces[0] == director.Link && len(st.Services) == 2
	})

	ctx := context.Background()
	// Control: the director adds the option, but without the real
	// server's programs the applications see its source address.
	for _, f := range families {
		r, local, err := askTracked(ctx, tp.Client(), f.srcs[0], f.vip)
		if err != nil {
			t.Fatalf("%s control: %v", f.name, err)
		}
		if !contains(f.snat, r.Peer.Addr()) || !contains(f.snat, r.PeerName.Addr()) {
			t.Errorf("%s without the real-server role's programs: accept %s, getpeername %s; want one of the director's %v (client %s)",
				f.name, r.Peer, r.PeerName, f.snat, local)
		}
	}

	var backends, directors []string
	for _, f := range families {
		for _, l := range f.local {
			backends = append(backends, fmt.Sprintf("%q", l.String()))
		}
		for _, a := range f.snat {
			directors = append(directors, fmt.Sprintf("%q", a.String()))
		}
	}
	rsAgent := newRealServer(t, tp.RS(1), fmt.Sprintf("  client_address:\n    mode: toa\n    directors: [%s]\n    backends: [%s]\n    cgroup: %s\n",
		strings.Join(directors, ", "), strings.Join(backends, ", "), ownCgroup(t)))
	rsAgent.start()
	rsAgent.waitReady(0)
	rsAgent.waitLog(0, 15*time.Second, "op=toa-attach")
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
	st := statusPart[toaStatus](t, director, "toa")
	t.Logf("director's lvsd status toa: %+v", st)
	if st.Added < uint64(asked) || st.NoRoom != 0 {
		t.Errorf("director counters %+v: want at least %d options added, none without room", st, asked)
	}
	if out, code := runLVSD(t, tp.RS(1), "status", "--socket=/run/lvsd-e2e/"+tp.RS(1).Name+".sock"); code != 0 ||
		!strings.Contains(out, "client address (toa)") || strings.Contains(out, "NOT IN PLACE") {
		t.Errorf("real server's lvsd status: exit %d:\n%s", code, out)
	}

	// Turned off on the director: its program goes, the services stay.
	off := d.logSize()
	for _, f := range families {
		writeFile(t, filepath.Join(d.dir, "services.d", "web"+f.name+".yaml"), service(f, ""))
	}
	d.hup()
	d.waitLog(off, 15*time.Second, "op=toa-remove")
	if out, _ := director.Run(ctx, "tc", "filter", "show", "dev", director.Link, "ingress"); strings.Contains(out, "lvsd_toa") {
		t.Errorf("a filter is left after client_address was removed:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(pinned, "director")); !os.IsNotExist(err) {
		t.Errorf("the director's objects are still pinned: %v", err)
	}
	r, _, err := askTracked(ctx, tp.Client(), families[0].srcs[1], families[0].vip)
	if err != nil || !contains(families[0].snat, r.PeerName.Addr()) {
		t.Errorf("after turning it off: %+v, %v; want the director's source address", r, err)
	}

	// On again, then the director stops: its program stays (a restart has
	// no moment without it) until lvsd cleanup removes it.
	off = d.logSize()
	for _, f := range families {
		writeFile(t, filepath.Join(d.dir, "services.d", "web"+f.name+".yaml"), service(f, "client_address: toa\n"))
	}
	d.hup()
	d.waitLog(off, 15*time.Second, "op=toa-attach")
	d.stop()
	if out, _ := director.Run(ctx, "tc", "filter", "show", "dev", director.Link, "ingress"); !strings.Contains(out, "lvsd_toa") {
		t.Errorf("the director's program went with lvsd:\n%s", out)
	}
	if out, code := runLVSD(t, director, "cleanup", "--config", d.config()); code != 0 || !strings.Contains(out, "toa-remove") {
		t.Errorf("cleanup on the director: exit %d: %s", code, out)
	}
	if out, _ := director.Run(ctx, "tc", "filter", "show", "dev", director.Link, "ingress"); strings.Contains(out, "lvsd_toa") {
		t.Errorf("a filter is left after the director's cleanup:\n%s", out)
	}

	rsAgent.stop()
	out, code := runLVSD(t, tp.RS(1), "cleanup", "--config", rsAgent.config())
	t.Logf("lvsd cleanup:\n%s", out)
	if code != 0 || !strings.Contains(out, "toa-remove") {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
	if left, _ := filepath.Glob(filepath.Join(pinned, "*", "*")); len(left) > 0 {
		t.Errorf("left pinned after cleanup: %v", left)
	}
	if out, code := runLVSD(t, tp.RS(1), "cleanup", "--config", rsAgent.config()); code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Errorf("second cleanup: exit %d: %s", code, out)
	}
}

// toaStatus is the toa part of the director's `lvsd status --json`.
type toaStatus struct {
	Interfaces []string `json:"interfaces"`
	Services   []string `json:"services"`
	Added      uint64   `json:"options_added"`
	NoRoom     uint64   `json:"no_room"`
	Stripped   uint64   `json:"forged_stripped"`
}

// systemBPFFS makes sure /sys/fs/bpf is a BPF file system, where lvsd pins
// its objects, mounting one for the test if the VM has none there, and
// returns lvsd's pin root in it, which must be empty to start with.
func systemBPFFS(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
			t.Fatalf("mounting a BPF file system at /sys/fs/bpf: %v", err)
		}
		t.Cleanup(func() { unix.Unmount("/sys/fs/bpf", unix.MNT_DETACH) })
	}
	root := toa.DefaultPinRoot
	if left, _ := filepath.Glob(filepath.Join(root, "*", "*")); len(left) > 0 {
		t.Fatalf("objects of an earlier run are pinned: %v", left)
	}
	return root
}
