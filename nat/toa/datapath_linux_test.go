package toa

import (
	"context"
	"net/netip"
	"testing"
)

// rig is the topology with the director's program on its client-facing
// interface and the real server's programs (attached or not) on the
// server's cgroup.
type rig struct {
	tp   topo
	cg   string
	dir  *KernelDirector
	rs   *KernelRealServer
	root string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	requireRoot(t)
	ctx := context.Background()
	r := &rig{tp: newTopo(t), cg: cgroup(t), root: bpfFS(t)}
	var err error
	r.dir, err = OpenDirector(ctx, DirectorOptions{Options: Options{PinRoot: r.root}, NetNS: nsHandle(t, r.tp.director)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.dir.Close() })
	if err := r.dir.Attach(ctx, "dc"); err != nil {
		t.Fatal(err)
	}
	err = r.dir.SetServices(ctx, []netip.AddrPort{
		netip.AddrPortFrom(vip4, port), netip.AddrPortFrom(vip6, port), netip.AddrPortFrom(vip4, dualPort)})
	if err != nil {
		t.Fatal(err)
	}
	r.rs, err = OpenRealServer(ctx, Options{PinRoot: r.root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.rs.Close() })
	if err := r.rs.SetServices(ctx, []netip.AddrPort{
		netip.AddrPortFrom(server4, port), netip.AddrPortFrom(server6, port), netip.AddrPortFrom(server4, dualPort)}); err != nil {
		t.Fatal(err)
	}
	if err := r.rs.SetDirectors(ctx, []netip.Addr{snat4, snat6}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) attachRealServer(t *testing.T) {
	t.Helper()
	if err := r.rs.Attach(context.Background(), r.cg); err != nil {
		t.Fatal(err)
	}
}

// services are the three ways in: IPv4 and IPv6 sockets, and IPv4 on the
// server's dual-stack socket (the getpeername6 hook with a mapped address).
var services = []struct {
	name    string
	clients []netip.Addr
	vip     netip.AddrPort
	snat    netip.Addr
}{
	{"ipv4", clients4, netip.AddrPortFrom(vip4, port), snat4},
	{"ipv6", clients6, netip.AddrPortFrom(vip6, port), snat6},
	{"ipv4 on a dual-stack socket", clients4, netip.AddrPortFrom(vip4, dualPort), snat4},
}

// TestClientAddress: with both sides' programs, accept() and getpeername()
// on the server return each client's own address and port, from several
// source addresses of each family; without the real server's programs they
// return the director's source address.
func TestClientAddress(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()

	control := startServer(t, r.tp, r.cg)
	for _, svc := range services {
		got, local := dial(t, r.tp, svc.clients[0], svc.vip)
		control.next(t, got.accept.Port())
		if got.accept.Addr() != svc.snat || got.peer.Addr() != svc.snat {
			t.Errorf("%s without the real server's programs: accept %s, getpeername %s; want the director's %s (client %s)",
				svc.name, got.accept, got.peer, svc.snat, local)
		}
	}

	r.attachRealServer(t)
	// A listener opened before the programs kept no SYN: its connections
	// keep the director's address, and are counted.
	got, _ := dial(t, r.tp, clients4[0], netip.AddrPortFrom(vip4, port))
	if got.peer.Addr() != snat4 {
		t.Errorf("a listener older than the programs: getpeername %s, want the director's %s", got.peer, snat4)
	}
	if st, err := r.rs.Stats(ctx); err != nil || st.NoSYN == 0 {
		t.Errorf("real server stats %+v, %v: want NoSYN counted for the older listener", st, err)
	}
	control.stop()
	srv := startServer(t, r.tp, r.cg) // listening after the programs are attached

	want := 0
	for _, svc := range services {
		for _, src := range svc.clients {
			got, local := dial(t, r.tp, src, svc.vip)
			srv.next(t, got.accept.Port())
			want++
			if got.accept != local || got.peer != local {
				t.Errorf("%s from %s: accept %s, getpeername %s; want the client's %s", svc.name, src, got.accept, got.peer, local)
			}
		}
	}
	dst, err := r.dir.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first connections (control, older listener) got the option too.
	if dst.Added < uint64(want) || dst.NoRoom != 0 || dst.Unsupported != 0 {
		t.Errorf("director stats %+v: want at least %d added, nothing else", dst, want)
	}
	rst, err := r.rs.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rst.Stored != uint64(want) || rst.NoOption != 0 || rst.NotDirector != 0 {
		t.Errorf("real server stats %+v: want %d stored", rst, want)
	}
}

// TestForgedOptionDoesNotSpoof: a client's SYN and ACK carrying their own
// TOA option with another address: the director overwrites both, and the
// server sees the client's real address.
func TestForgedOptionDoesNotSpoof(t *testing.T) {
	r := newRig(t)
	r.attachRealServer(t)
	srv := startServer(t, r.tp, r.cg)
	forged := netip.MustParseAddrPort("203.0.113.9:1")
	forged6 := netip.MustParseAddrPort("[2001:db8::9]:1")
	mss := []byte{2, 4, 0x05, 0xb4}
	for i, tc := range []struct {
		src, dst     netip.AddrPort
		syn, ackOpts []byte
	}{
		{netip.AddrPortFrom(clients4[1], 41001), netip.AddrPortFrom(vip4, port), append(mss, Option(forged)...), Option(forged)},
		{netip.AddrPortFrom(clients6[1], 41002), netip.AddrPortFrom(vip6, port), Option(forged6), Option(forged6)},
	} {
		c := newRawClient(t, r.tp, tc.src, tc.dst)
		c.handshake(t, tc.syn, tc.ackOpts)
		got := srv.next(t, tc.src.Port())
		if got.accept != tc.src || got.peer != tc.src {
			t.Errorf("case %d: a forged option: accept %s, getpeername %s; want the client's %s", i, got.accept, got.peer, tc.src)
		}
	}
	st, err := r.dir.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Stripped < 4 || st.Added < 2 {
		t.Errorf("director stats %+v: want both SYNs' and both ACKs' options stripped and the SYNs' own added", st)
	}
}

// TestFullOptionsPassWithout: a SYN whose 40 bytes of options leave no room
// reaches the server unchanged, the connection is made with the director's
// address, and the director counts it.
func TestFullOptionsPassWithout(t *testing.T) {
	r := newRig(t)
	r.attachRealServer(t)
	srv := startServer(t, r.tp, r.cg)
	full := []byte{2, 4, 0x05, 0xb4}
	for len(full) < 40 {
		full = append(full, 1)
	}
	for _, tc := range []struct {
		src, dst netip.AddrPort
		snat     netip.Addr
	}{
		{netip.AddrPortFrom(clients4[2], 42001), netip.AddrPortFrom(vip4, port), snat4},
		{netip.AddrPortFrom(clients6[2], 42002), netip.AddrPortFrom(vip6, port), snat6},
	} {
		c := newRawClient(t, r.tp, tc.src, tc.dst)
		c.handshake(t, full, nil)
		got := srv.next(t, tc.src.Port())
		if got.peer.Addr() != tc.snat {
			t.Errorf("a SYN without room from %s: getpeername %s, want the director's %s", tc.src, got.peer, tc.snat)
		}
	}
	ctx := context.Background()
	st, err := r.dir.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NoRoom != 2 || st.Added != 0 {
		t.Errorf("director stats %+v: want 2 without room, none added", st)
	}
	if rs, err := r.rs.Stats(ctx); err != nil || rs.NoOption != 2 {
		t.Errorf("real server stats %+v, %v: want 2 without an option", rs, err)
	}
}
