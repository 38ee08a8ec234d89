//go:build e2e && linux

package ecmplab_test

// The engine-level VM proof of cluster/bgp and cluster/bfd against FRR 8.4
// as the router (ecmp-lab.md). Run with
//
//	make e2e E2E_PKGS=./e2e/ecmplab
//
// or go test -tags e2e -c -o /tmp/ecmplab.test ./e2e/ecmplab &&
// e2e/vm/run -- /tmp/ecmplab.test -test.v

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

func TestMain(m *testing.M) {
	ecmplab.RunHelperIfRequested()
	os.Exit(m.Run())
}

var (
	vip4 = netip.MustParsePrefix("192.0.2.10/32")
	vip6 = netip.MustParsePrefix("2001:db8::10/128")
)

const (
	runs      = 5
	waitLimit = 60 * time.Second
)

// lab is a router running FRR and one speaker per director.
type lab struct {
	t        *testing.T // the test the speakers belong to (subtests share them)
	tp       *topo.Topology
	router   *topo.Host
	frr      *topo.FRR
	speakers []*ecmplab.Speaker
}

func newLab(t *testing.T, directors int, neighbor func(d *topo.Host, v6 bool) ecmplab.Neighbor) *lab {
	t.Helper()
	tp := topo.New(t, topo.WithRouter(), topo.WithDirectors(directors), topo.WithRealServers(0), topo.WithClientSources(0))
	l := &lab{t: t, tp: tp, router: tp.Router()}
	var ns []ecmplab.Neighbor
	for _, d := range tp.Directors() {
		ns = append(ns, neighbor(d, false), neighbor(d, true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	start := time.Now()
	f, err := l.router.StartFRR(ctx, ecmplab.RouterConfig(l.router.V4, ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router bgpd log:\n%s\nbfdd log:\n%s", f.Log("bgpd"), f.Log("bfdd"))
		}
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("router FRR started and configured in %v", time.Since(start).Round(time.Millisecond))
	l.frr = f
	return l
}

// speakerConfig: a director with a session per family to the router.
func speakerConfig(d, router *topo.Host, password string) ecmplab.SpeakerConfig {
	peer := func(addr, local netip.Addr) bgp.PeerConfig {
		return bgp.PeerConfig{Address: addr, ASN: ecmplab.RouterASN, LocalAddress: local, Password: password,
			HoldTime: 3 * time.Second, KeepaliveInterval: time.Second, ConnectRetry: time.Second, BFD: true}
	}
	return ecmplab.SpeakerConfig{ASN: ecmplab.DirectorASN, RouterID: d.V4,
		Peers: []bgp.PeerConfig{peer(router.V4, d.V4), peer(router.V6, d.V6)}}
}

func (l *lab) startSpeaker(i int, cfg ecmplab.SpeakerConfig) *ecmplab.Speaker {
	t := l.t
	t.Helper()
	d := l.tp.Director(i)
	s, err := ecmplab.StartSpeaker(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.Exited() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			s.Close(ctx)
		}
		if t.Failed() {
			t.Logf("%v speaker log:\n%s", d, s.Log())
		}
	})
	return s
}

func (l *lab) waitNexthops(t *testing.T, prefix netip.Prefix, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := l.router.WaitNexthops(ctx, prefix, n); err != nil {
		t.Fatal(err)
	}
}

func (l *lab) watch(t *testing.T, prefix netip.Prefix) (<-chan topo.RouteEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ev, err := l.router.WatchRoute(ctx, prefix)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return ev, cancel
}

// await waits for a change of the route after since that satisfies cond.
func await(t *testing.T, ev <-chan topo.RouteEvent, since time.Time, cond func([]netip.Addr) bool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	at, err := ecmplab.Await(ctx, ev, since, cond)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func TestECMPEngineAgainstFRR(t *testing.T) {
	const n = 3
	l := newLab(t, n, func(d *topo.Host, v6 bool) ecmplab.Neighbor {
		return ecmplab.Neighbor{Address: d.Addr(v6), BFD: true}
	})
	ctx := context.Background()
	start := time.Now()
	for i := 1; i <= n; i++ {
		s := l.startSpeaker(i, speakerConfig(l.tp.Director(i), l.router, ""))
		if err := s.SetRoutes(ctx, bgp.Route{Prefix: vip4}, bgp.Route{Prefix: vip6}); err != nil {
			t.Fatal(err)
		}
		l.speakers = append(l.speakers, s)
	}
	l.waitNexthops(t, vip4, n)
	l.waitNexthops(t, vip6, n)
	t.Logf("converged: %d speakers started -> %d IPv4 and IPv6 nexthops in %v", n, n, time.Since(start).Round(time.Millisecond))
	l.checkSessions(t, n)

	t.Run("withdraw", func(t *testing.T) { l.measureWithdraw(t) })
	t.Run("link cut", func(t *testing.T) { l.measureLinkCut(t) })
	t.Run("kill -9", func(t *testing.T) { l.measureKill(t) })
	t.Run("router restart", func(t *testing.T) { l.routerRestart(t) })
	t.Run("graceful close", func(t *testing.T) { l.gracefulClose(t) })
}

// checkSessions: every speaker has both sessions established with BFD up
// and one route announced on each; the router sees every BFD peer up.
func (l *lab) checkSessions(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitLimit)
	for i, s := range l.speakers {
		for {
			st, err := s.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ok := len(st.Peers) == 2
			for _, p := range st.Peers {
				ok = ok && p.State == bgp.StateEstablished && p.BFD == "up" && p.Announced == 1
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("director %d: %+v", i+1, st.Peers)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for i, s := range l.speakers {
		st, _ := s.Status(ctx)
		for _, p := range st.Peers {
			if p.Flaps > 0 {
				t.Logf("director %d, session with %s: %d flaps, last: %s", i+1, p.Address, p.Flaps, p.LastFlapReason)
			}
		}
	}
	t.Logf("router:\n%s", l.waitRouterBFD(t, 2*n))
}

// waitRouterBFD waits until the router has up BFD sessions and returns
// `show bfd peers brief`.
func (l *lab) waitRouterBFD(t *testing.T, up int) string {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		out, err := l.frr.Vtysh(context.Background(), "show bfd peers brief")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range ecmplab.BFDPeers(out) {
			if st == "up" {
				n++
			}
		}
		if n >= up {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("router BFD peers (want %d up):\n%s", up, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measureWithdraw: SetRoutes withdraw → path gone in the router's kernel.
func (l *lab) measureWithdraw(t *testing.T) {
	ev, stop := l.watch(t, vip4)
	defer stop()
	s, d := l.speakers[2], l.tp.Director(3).V4
	ctx := context.Background()
	var lat []time.Duration
	for range runs {
		l.waitNexthops(t, vip4, 3)
		t0 := time.Now()
		if err := s.Withdraw(ctx); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, await(t, ev, t0, ecmplab.Without(d)).Sub(t0))
		t1 := time.Now()
		if err := s.SetRoutes(ctx, bgp.Route{Prefix: vip4}, bgp.Route{Prefix: vip6}); err != nil {
			t.Fatal(err)
		}
		await(t, ev, t1, ecmplab.With(d))
	}
	t.Logf("withdraw (call -> router kernel route): %s", ecmplab.Summary(lat))
}

// measureLinkCut: a director's link goes down → BFD on the router drops
// the path; the link back → the path returns (BFD up, GoBGP's 5 s idle
// hold, reconnect).
func (l *lab) measureLinkCut(t *testing.T) {
	ev, stop := l.watch(t, vip4)
	defer stop()
	d := l.tp.Director(2)
	var cut, back []time.Duration
	for range runs {
		// BFD starts 1-2 s after BGP is established: cut a protected link.
		l.waitNexthops(t, vip4, 3)
		l.waitRouterBFD(t, 6)
		t0 := time.Now()
		if err := d.SetPort(false); err != nil {
			t.Fatal(err)
		}
		cut = append(cut, await(t, ev, t0, ecmplab.Without(d.V4)).Sub(t0))
		t1 := time.Now()
		if err := d.SetPort(true); err != nil {
			t.Fatal(err)
		}
		back = append(back, await(t, ev, t1, ecmplab.With(d.V4)).Sub(t1))
	}
	t.Logf("link cut -> path removed: %s", ecmplab.Summary(cut))
	t.Logf("link restored -> path back: %s", ecmplab.Summary(back))
	if m := median(cut); m > 500*time.Millisecond {
		t.Errorf("median detection %v > 0.5 s", m)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// measureKill: kill -9 of a speaker → the kernel closes its sessions →
// the router withdraws at once; a new speaker comes back.
func (l *lab) measureKill(t *testing.T) {
	ev, stop := l.watch(t, vip4)
	defer stop()
	t0 := time.Now()
	l.speakers[0].Kill()
	d := l.tp.Director(1).V4
	t.Logf("kill -9 -> path removed: %v", await(t, ev, t0, ecmplab.Without(d)).Sub(t0).Round(time.Millisecond))
	t1 := time.Now()
	s := l.startSpeaker(1, speakerConfig(l.tp.Director(1), l.router, ""))
	if err := s.SetRoutes(context.Background(), bgp.Route{Prefix: vip4}, bgp.Route{Prefix: vip6}); err != nil {
		t.Fatal(err)
	}
	l.speakers[0] = s
	t.Logf("new speaker started -> path back: %v", await(t, ev, t1, ecmplab.With(d)).Sub(t1).Round(time.Millisecond))
}

// routerRestart: FRR on the router stops and starts again; the speakers
// reconnect by themselves and announce again.
func (l *lab) routerRestart(t *testing.T) {
	t0 := time.Now()
	if err := l.frr.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("router FRR restarted in %v", time.Since(t0).Round(time.Millisecond))
	l.waitNexthops(t, vip4, 3)
	l.waitNexthops(t, vip6, 3)
	t.Logf("router restart -> 3 IPv4 and IPv6 nexthops again after %v", time.Since(t0).Round(time.Millisecond))
	l.checkSessions(t, 3)
}

// gracefulClose: Close withdraws, says Cease and BFD AdminDown; the router
// counts no BFD failure.
func (l *lab) gracefulClose(t *testing.T) {
	ev, stop := l.watch(t, vip4)
	defer stop()
	t0 := time.Now()
	if err := l.speakers[1].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful close: call returned after %v, path removed after %v", time.Since(t0).Round(time.Millisecond),
		await(t, ev, t0, ecmplab.Without(l.tp.Director(2).V4)).Sub(t0).Round(time.Millisecond))
	for _, line := range strings.Split(l.speakers[1].Log(), "\n") {
		if strings.Contains(line, "speaker stopped") {
			t.Logf("speaker: %s", line)
		}
	}
	out, _ := l.frr.Vtysh(context.Background(), "show bfd peer "+l.tp.Director(2).V4.String())
	t.Logf("router's BFD session with the closed director:\n%s", out)
	out, _ = l.frr.Vtysh(context.Background(), "show bgp neighbors "+l.tp.Director(2).V4.String())
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Last reset") || strings.Contains(line, "BGP state") ||
			strings.Contains(line, "Notification") {
			t.Logf("router: %s", strings.TrimSpace(line))
		}
	}
}

func TestECMPEngineTCPMD5(t *testing.T) {
	l := newLab(t, 3, func(d *topo.Host, v6 bool) ecmplab.Neighbor {
		return ecmplab.Neighbor{Address: d.Addr(v6), Password: "s3cret-" + d.ID}
	})
	ctx := context.Background()
	cases := []struct {
		director   int
		password   string
		listenPort uint16
	}{
		{1, "s3cret-director", 0}, // right
		{2, "wrong", 179},         // wrong, listening: the router's SYNs fail here
		{3, "wrong", 0},           // wrong, dialing only
	}
	var speakers []*ecmplab.Speaker
	for _, c := range cases {
		cfg := speakerConfig(l.tp.Director(c.director), l.router, c.password)
		for i := range cfg.Peers {
			cfg.Peers[i].BFD = false
		}
		cfg.MD5Hint, cfg.ListenPort = 4*time.Second, c.listenPort
		s := l.startSpeaker(c.director, cfg)
		if err := s.SetRoutes(ctx, bgp.Route{Prefix: vip4}, bgp.Route{Prefix: vip6}); err != nil {
			t.Fatal(err)
		}
		speakers = append(speakers, s)
	}
	l.waitNexthops(t, vip4, 1)
	l.waitNexthops(t, vip6, 1)
	got, _ := l.router.Nexthops(vip4)
	if got[0] != l.tp.Director(1).V4 {
		t.Fatalf("the one path is via %v", got)
	}
	for i, c := range cases[1:] {
		s := speakers[i+1]
		deadline := time.Now().Add(waitLimit)
		for !strings.Contains(s.Log(), "no BGP session with "+l.router.V4.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("director %d: no hint logged:\n%s", c.director, s.Log())
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, line := range strings.Split(s.Log(), "\n") {
			if strings.Contains(line, "no BGP session with") {
				t.Logf("director %d (listen port %d): %s", c.director, c.listenPort, line)
			}
		}
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Peers {
			if p.State == bgp.StateEstablished {
				t.Errorf("director %d: session with %s established with a wrong password", c.director, p.Address)
			}
		}
		t.Logf("director %d: kernel TCP-MD5 failures in its namespace: %d", c.director, st.MD5Failures)
		if c.listenPort != 0 && !strings.Contains(s.Log(), "TCP-MD5 failures: check the password") {
			t.Errorf("director %d: the hint does not name the password:\n%s", c.director, s.Log())
		}
	}
	out, _ := l.frr.Vtysh(ctx, "show bgp summary")
	t.Logf("router:\n%s", out)
	if log := l.frr.Log("bgpd"); strings.Contains(strings.ToLower(log), "md5") {
		t.Logf("FRR logged about MD5:\n%s", log)
	}
}
