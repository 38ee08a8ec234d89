//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The real-server tests run `lvsd run` with role realserver on the real
// servers: the tests themselves never put a VIP on lo nor set an ARP
// sysctl there (compare holdVIPOnLoopback, which the director tests use).

// drService is a DR service file for the director with the given backends.
func drService(vip netip.Addr, backends ...netip.Addr) string {
	s := fmt.Sprintf("service: web\nvip: %s\nports: [80]\nforwarding: dr\naffinity: client-ip\nbackends:\n", vip)
	for _, b := range backends {
		s += fmt.Sprintf("  - {address: %s}\n", b)
	}
	return s
}

// startRealServers runs lvsd as a real server on each host with the same
// realserver block and waits until each is ready.
func startRealServers(t *testing.T, block string, hosts ...*topo.Host) []*lvsd {
	t.Helper()
	var out []*lvsd
	for _, h := range hosts {
		l := newRealServer(t, h, block)
		l.start()
		out = append(out, l)
	}
	for _, l := range out {
		l.waitReady(0)
	}
	return out
}

// TestRealServerDR: a DR service works end to end with real servers set up
// only by lvsd, in both families; the VIPs sit on lo as /32 and /128 (the
// latter without duplicate address detection, so usable at once).
func TestRealServerDR(t *testing.T) {
	for _, fam := range []struct {
		name string
		v6   bool
		vip  string
	}{{"IPv4", false, "10.0.0.50"}, {"IPv6", true, "fd00::50"}} {
		t.Run(fam.name, func(t *testing.T) {
			tp := topo.New(t, topo.WithClientSources(16))
			vip := netip.MustParseAddr(fam.vip)
			rs1, rs2 := tp.RS(1), tp.RS(2)
			d := newDirector(t, tp.Director(1), map[string]string{"web": drService(vip, rs1.Addr(fam.v6), rs2.Addr(fam.v6))})
			d.start()
			startRealServers(t, fmt.Sprintf("  vips: [\"%s\"]\n  arp_interfaces: [eth0]\n", vip), rs1, rs2)
			serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
			d.waitServices(1, 2)

			want := netip.PrefixFrom(vip, vip.BitLen())
			for _, rs := range []*topo.Host{rs1, rs2} {
				if lo := loAddrs(t, rs); !slices.Contains(lo, want) {
					t.Errorf("%v: lo holds %v, want %s", rs, lo, want)
				}
				for _, k := range []string{"all", "eth0"} {
					ign, _ := rs.ReadSysctl("net/ipv4/conf/" + k + "/arp_ignore")
					ann, _ := rs.ReadSysctl("net/ipv4/conf/" + k + "/arp_announce")
					if ign != "1" || ann != "2" {
						t.Errorf("%v: %s arp_ignore=%s arp_announce=%s, want 1 and 2", rs, k, ign, ann)
					}
				}
				if fam.v6 {
					checkNoDAD(t, rs, vip)
				}
			}
			results := ask(t, tp.Client(), tp.ClientSources(fam.v6), netip.AddrPortFrom(vip, 80), echo.TCP, 2)
			checkReplies(t, results, vip)
			dist := distribution(results)
			t.Logf("distribution over %d sources × 2 connections: %s", len(tp.ClientSources(fam.v6)), formatDistribution(dist))
			if dist["rs1"] == 0 || dist["rs2"] == 0 {
				t.Errorf("replies came from %s, want both rs1 and rs2", formatDistribution(dist))
			}
		})
	}
	t.Run("rp_filter", testRealServerRPFilter)
}

// checkNoDAD fails unless vip is on lo with IFA_F_NODAD and not tentative.
func checkNoDAD(t *testing.T, h *topo.Host, vip netip.Addr) {
	t.Helper()
	err := h.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(lo, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, _ := netip.AddrFromSlice(a.IP); ip == vip {
				if a.Flags&unix.IFA_F_NODAD == 0 || a.Flags&unix.IFA_F_TENTATIVE != 0 {
					t.Errorf("%v: %s on lo has flags %#x, want nodad and not tentative", h, vip, a.Flags)
				}
				return nil
			}
		}
		t.Errorf("%v: %s is not on lo", h, vip)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testRealServerRPFilter proves what DR needs of rp_filter. rs1 starts with
// the strict reverse-path filter of RHEL-like hosts (all and eth0 = 1) and
// a second link to the client, over which replies to one client address
// (asym) leave, while its requests come in on eth0 from the director. lvsd
// loosens rp_filter (1 → 2) and both kinds of client are served. Set back
// to strict by hand (as a distribution's sysctl.d would), the symmetric
// client still works (single-homed DR does not need the change) but the
// asymmetric one is dropped, counted as IPReversePathFilter; the next pass
// of lvsd loosens it again and it works.
func testRealServerRPFilter(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(4), topo.WithRealServers(1))
	vip := netip.MustParseAddr("10.0.0.50")
	rs, client := tp.RS(1), tp.Client()
	sources := tp.ClientSources(false)
	asym, sym := sources[0], sources[1]
	strict := func() {
		t.Helper()
		for _, k := range []string{"all", "eth0"} {
			if err := rs.Sysctl("net/ipv4/conf/"+k+"/rp_filter", "1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	strict() // the host's own setting before lvsd, not part of the DR setup
	addReturnLink(t, rs, client, asym)
	d := newDirector(t, tp.Director(1), map[string]string{"web": drService(vip, rs.V4)})
	d.start()
	l := startRealServers(t, "  vips: [10.0.0.50]\n  arp_interfaces: [eth0]\n", rs)[0]
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs)
	d.waitServices(1, 1)
	for _, k := range []string{"all", "eth0"} {
		if v, _ := rs.ReadSysctl("net/ipv4/conf/" + k + "/rp_filter"); v != "2" {
			t.Errorf("%s/rp_filter=%s after lvsd started, want 2 (loose)", k, v)
		}
	}
	askOne := func(src netip.Addr, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		rep, err := echo.Ask(ctx, client, src, netip.AddrPortFrom(vip, 80), echo.TCP)
		if err == nil && (rep.Peer.Addr() != src || rep.Local.Addr() != vip) {
			err = fmt.Errorf("reply %v: want peer %s and local %s", rep, src, vip)
		}
		return err
	}
	for _, src := range []netip.Addr{asym, sym} {
		if err := askOne(src, 5*time.Second); err != nil {
			t.Errorf("loose rp_filter, from %s: %v", src, err)
		}
	}
	dropped := netstat(t, rs, "TcpExt", "IPReversePathFilter")

	// Right after a pass of lvsd (SIGHUP), so that its next periodic pass
	// (10 s later) does not loosen rp_filter in the middle of the check.
	off := l.logSize()
	l.hup()
	l.waitLog(off, 15*time.Second, "msg=\"in step\"")
	off = l.logSize()
	strict()
	if err := askOne(sym, 5*time.Second); err != nil {
		t.Errorf("strict rp_filter, symmetric path from %s: %v (single-homed DR should not need loose)", sym, err)
	}
	if err := askOne(asym, 2*time.Second); err == nil {
		t.Errorf("strict rp_filter, asymmetric path from %s: answered, want dropped", asym)
	}
	if now := netstat(t, rs, "TcpExt", "IPReversePathFilter"); now <= dropped {
		t.Errorf("IPReversePathFilter stayed at %d: the asymmetric request was not dropped by rp_filter", now)
	} else {
		t.Logf("strict rp_filter dropped %d packets of the asymmetric client", now-dropped)
	}
	if fixed := l.logSince(off); strings.Contains(fixed, "rp_filter=2") {
		t.Errorf("lvsd loosened rp_filter during the strict check; the check proved nothing:\n%s", fixed)
	}
	l.hup() // the next pass, without waiting for the resync period
	l.waitLog(off, 15*time.Second, "op=set-sysctl", "net/ipv4/conf/eth0/rp_filter=2 (was 1)")
	if err := askOne(asym, 5*time.Second); err != nil {
		t.Errorf("rp_filter loosened again, asymmetric path from %s: %v", asym, err)
	}
}

// TestRealServerARP: from the client, only the director answers ARP (and
// IPv6 neighbour solicitation) for the VIP, the client's neighbour table
// keeps the director's MAC for it, the real servers' own ARP requests never
// name the VIP as their source, and every TCP packet the real servers send
// to the client comes from the VIP. Seen by an in-process packet capture on
// the client's interface.
func TestRealServerARP(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(16))
	vip4, vip6 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")
	rs1, rs2, director, client := tp.RS(1), tp.RS(2), tp.Director(1), tp.Client()
	d := newDirector(t, director, map[string]string{
		"web4": drService(vip4, rs1.V4, rs2.V4),
		"web6": strings.Replace(drService(vip6, rs1.V6, rs2.V6), "service: web", "service: web6", 1),
	})
	d.start()
	startRealServers(t, "  vips: [10.0.0.50, \"fd00::50\"]\n  arp_interfaces: [eth0]\n", rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	d.waitServices(2, 2)

	capt := startCapture(t, client, client.Link)
	for round := 0; round < 2; round++ {
		// Forget the VIPs so the client resolves them again: every host that
		// would answer gets the chance to.
		forgetNeighbour(t, client, client.Link, vip4)
		forgetNeighbour(t, client, client.Link, vip6)
		checkReplies(t, ask(t, client, tp.ClientSources(false), netip.AddrPortFrom(vip4, 80), echo.TCP, 1), vip4)
		checkReplies(t, ask(t, client, tp.ClientSources(true), netip.AddrPortFrom(vip6, 80), echo.TCP, 1), vip6)
	}
	time.Sleep(200 * time.Millisecond) // the last frames
	capt.stop()

	dmac := director.MAC.String()
	rsName := map[string]string{rs1.MAC.String(): "rs1", rs2.MAC.String(): "rs2"}
	var answers4, answers6 int
	rsRequests := map[string]int{} // ARP requests and NS per real server
	rsTCP := map[string]int{}      // TCP packets per real server and family
	for _, f := range capt.frames() {
		name, fromRS := rsName[f.src]
		switch {
		case f.kind == "arp-reply" && f.ip == vip4, f.kind == "na" && f.tgt == vip6:
			if f.src != dmac {
				t.Errorf("%s: the VIP is answered for by %s (%s), want only the director %s", f, f.src, name, dmac)
			}
			if f.kind == "na" {
				answers6++
			} else {
				answers4++
			}
		case !fromRS:
		case f.kind == "arp-request" || f.kind == "ns":
			rsRequests[name+" "+f.kind]++
			if f.ip == vip4 || f.ip == vip6 {
				t.Errorf("%s: %s resolves a neighbour with the VIP as source (arp_announce)", f, name)
			}
		case f.kind == "arp-reply" || f.kind == "na":
			if f.ip == vip4 || f.tgt == vip6 {
				t.Errorf("%s: %s answers for the VIP", f, name)
			}
		case f.kind == "tcp":
			fam := "v4"
			if f.ip.Is6() {
				fam = "v6"
			}
			rsTCP[name+" "+fam]++
			if (f.ip != vip4 && f.ip != vip6) || f.port != 80 {
				t.Errorf("%s: a reply of %s to the client does not come from the VIP port 80", f, name)
			}
		}
	}
	t.Logf("captured %d frames: %d ARP replies and %d NA for the VIPs; real servers' requests %v; TCP from real servers %v",
		len(capt.frames()), answers4, answers6, rsRequests, rsTCP)
	if answers4 < 2 || answers6 < 2 {
		t.Errorf("%d ARP replies and %d NA for the VIPs in 2 rounds, want ≥2 each (one per resolution)", answers4, answers6)
	}
	for _, key := range []string{"rs1 arp-request", "rs2 arp-request", "rs1 ns", "rs2 ns"} {
		if rsRequests[key] == 0 {
			t.Errorf("no %s seen: the arp_announce check above proved nothing", key)
		}
	}
	for _, key := range []string{"rs1 v4", "rs2 v4", "rs1 v6", "rs2 v6"} {
		if rsTCP[key] == 0 {
			t.Errorf("no TCP packet from %s seen", key)
		}
	}
	for _, vip := range []netip.Addr{vip4, vip6} {
		if mac := neighbour(t, client, client.Link, vip); mac != dmac {
			t.Errorf("the client's neighbour table maps %s to %q, want the director's %s", vip, mac, dmac)
		}
	}
}

// TestRealServerLifecycle: lvsd adds exactly the VIPs and sysctls it needs,
// adopts a configured VIP already on lo, removes a VIP (and nothing else)
// when it leaves the configuration, changes nothing on restart, leaves
// everything in place when stopped, and `lvsd cleanup` restores the host
// as it was, including a VIP added by hand.
func TestRealServerLifecycle(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(1), topo.WithRealServers(1))
	rs := tp.RS(1)
	hand, adopted := netip.MustParsePrefix("10.0.0.99/32"), netip.MustParsePrefix("10.0.0.52/32")
	for _, p := range []netip.Prefix{hand, adopted} { // by hand, before lvsd
		if err := rs.AddAddr(p, "lo"); err != nil {
			t.Fatal(err)
		}
	}
	original := hostSnapshot(t, rs)
	block := func(vips string) string { return "  vips: [" + vips + "]\n  arp_interfaces: [eth0]\n" }
	l := newRealServer(t, rs, block(`10.0.0.50, 10.0.0.51, 10.0.0.52, "fd00::50", "fd00::51"`))
	l.start()
	l.waitReady(0)
	running := hostSnapshot(t, rs)
	added, removed := lineDiff(original, running)
	for _, want := range []string{"addr lo 10.0.0.50/32", "addr lo 10.0.0.51/32", "addr lo fd00::50/128", "addr lo fd00::51/128",
		"sysctl ipv4/all/arp_ignore=1", "sysctl ipv4/all/arp_announce=2", "sysctl ipv4/eth0/arp_ignore=1", "sysctl ipv4/eth0/arp_announce=2"} {
		if !slices.ContainsFunc(added, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("after start, %q is missing; added: %q", want, added)
		}
	}
	if len(added) != 8 || len(removed) != 4 {
		t.Errorf("start changed more than 4 VIPs and 4 sysctls:\nadded %q\nremoved %q", added, removed)
	}
	if ops := appliedOps(l.log()); len(ops) != 8 {
		t.Errorf("start applied %d ops, want 8 (10.0.0.52 adopted, not added):\n%s", len(ops), formatOps(ops))
	}

	off := l.logSize()
	writeAtomic(t, l.config(), strings.Replace(readFile(t, l.config()), `10.0.0.51, 10.0.0.52, "fd00::50", "fd00::51"`, `10.0.0.52, "fd00::50"`, 1))
	l.waitLog(off, 15*time.Second, "msg=reconciled", "ops=2")
	afterRemove := hostSnapshot(t, rs)
	added, removed = lineDiff(running, afterRemove)
	if len(added) != 0 || len(removed) != 2 || !strings.HasPrefix(removed[0], "addr lo 10.0.0.51/32") || !strings.HasPrefix(removed[1], "addr lo fd00::51/128") {
		t.Errorf("removing 10.0.0.51 and fd00::51 from the config:\nadded %q\nremoved %q", added, removed)
	}

	l = l.restart("lvsd-restarted.log")
	if started := l.waitLog(0, time.Second, "msg=starting"); !strings.Contains(started, "owned_addresses=2 owned_sysctls=4") {
		t.Errorf("the restarted agent did not adopt its record: %s", started)
	}
	l.expectIdle(0, "the restarted agent")
	expectSameHost(t, "the restart", afterRemove, hostSnapshot(t, rs))

	out, code := runLVSD(t, rs, "cleanup", "--config", l.config())
	if code == 0 || !strings.Contains(out, "stop it first") {
		t.Errorf("cleanup with the agent running: exit %d, %q; want a refusal", code, out)
	}
	l.stop()
	expectSameHost(t, "stopping the agent (it must leave the VIPs)", afterRemove, hostSnapshot(t, rs))
	out, code = runLVSD(t, rs, "cleanup", "--config", l.config())
	t.Logf("lvsd cleanup:\n%s", out)
	if code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	if now := hostSnapshot(t, rs); now != original {
		a, r := lineDiff(original, now)
		t.Errorf("after cleanup the host differs from before lvsd:\nadded %q\nremoved %q", a, r)
	}
	if lo := loAddrs(t, rs); !slices.Contains(lo, hand) || !slices.Contains(lo, adopted) {
		t.Errorf("cleanup removed addresses lvsd did not add: lo holds %v", lo)
	}
	if out, code := runLVSD(t, rs, "cleanup", "--config", l.config()); code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Errorf("second cleanup: exit %d: %s", code, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRealServerDrain: the weight endpoint carries the configured weight;
// `lvsd drain` through the API socket (mode 0600) makes it 0 and that
// survives a restart of the agent; `lvsd undrain` restores it; a failing
// local check answers 503.
func TestRealServerDrain(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(1), topo.WithRealServers(1))
	rs, director := tp.RS(1), tp.Director(1)
	srv := serveEcho(t, echo.Config{TCP: []uint16{80}}, rs)["rs1"]
	l := startRealServers(t, "  vips: [10.0.0.50]\n  weight: 7\n  health:\n    listen: \":8080\"\n    checks: [{address: \"127.0.0.1:80\"}]\n", rs)[0]
	endpoint := netip.AddrPortFrom(rs.V4, 8080)
	expect := func(what string, wantCode int, wantWeight string) {
		t.Helper()
		code, weight, body := probeWeight(t, director, endpoint, "/healthz")
		if code != wantCode || weight != wantWeight {
			t.Errorf("%s: %d %s=%q %q, want %d and weight %s", what, code, "X-Load-Balancing-Endpoint-Weight", weight, body, wantCode, wantWeight)
		} else {
			t.Logf("%s: %d weight %s %q", what, code, weight, body)
		}
	}
	expect("in service", 200, "7")
	if code, weight, _ := probeWeight(t, director, netip.AddrPortFrom(rs.V6, 8080), "/healthz"); code != 200 || weight != "7" {
		t.Errorf("over IPv6: %d weight %q, want 200 and 7", code, weight)
	}
	sock := "/run/lvsd-e2e/" + rs.Name + ".sock"
	if fi, err := os.Stat(sock); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("API socket %s has mode %v, want 0600", sock, fi.Mode().Perm())
	}

	out, code := runLVSD(t, rs, "drain", "--config", l.config())
	if code != 0 || !strings.Contains(out, "drained") {
		t.Errorf("lvsd drain: exit %d: %s", code, out)
	}
	expect("drained", 200, "0")
	l = l.restart("lvsd-restarted.log")
	expect("drained, after a restart of the agent", 200, "0")
	out, code = runLVSD(t, rs, "undrain", "--config", l.config())
	if code != 0 || !strings.Contains(out, "announces 7") {
		t.Errorf("lvsd undrain: exit %d: %s", code, out)
	}
	expect("undrained", 200, "7")

	if err := srv.Stop(echo.TCP, 80); err != nil {
		t.Fatal(err)
	}
	expect("local check failing", 503, "0")
	if err := srv.Start(echo.TCP, 80); err != nil {
		t.Fatal(err)
	}
	expect("local check passing again", 200, "7")
}
