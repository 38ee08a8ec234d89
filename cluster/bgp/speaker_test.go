package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// The speaker is tested against a second GoBGP in the same process playing
// the router, over loopback: the router listens on 127.0.0.1 and a free
// port, the speaker dials from 127.0.0.2. No root needed.
var (
	loRouter  = netip.MustParseAddr("127.0.0.1")
	loSpeaker = netip.MustParseAddr("127.0.0.2")
	quiet     = slog.New(slog.NewTextHandler(io.Discard, nil))
)

const (
	routerASN  = 65000
	speakerASN = 65001
	waitLimit  = 30 * time.Second // generous: nothing here asserts timing
)

func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// startRouter runs a GoBGP that accepts the speaker (passive) and keeps
// what it learns.
func startRouter(t *testing.T, port uint16, peerASN uint32, password string) *server.BgpServer {
	t.Helper()
	return startRouterAt(t, loRouter, routerASN, port, peerASN, password)
}

// startRouterAt is startRouter with the router's address and AS.
func startRouterAt(t *testing.T, addr netip.Addr, asn uint32, port uint16, peerASN uint32, password string) *server.BgpServer {
	t.Helper()
	r := server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: quiet}))
	go r.Serve()
	ctx := context.Background()
	err := r.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: addr.String(),
		ListenPort: int32(port), ListenAddresses: []string{addr.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	err = r.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: loSpeaker.String(), PeerAsn: peerASN, AuthPassword: password},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: apiFamily(IPv4Unicast), Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: apiFamily(IPv6Unicast), Enabled: true}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRouter(r) })
	return r
}

// stopRouter stops the test router once no session is established:
// GoBGP's StopBgp races with the goroutines of established sessions (see
// Speaker.deletePeers). The speaker, closed first, tells the router.
func stopRouter(r *server.BgpServer) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		up := false
		r.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			up = up || p.GetState().GetSessionState() == api.PeerState_ESTABLISHED
		})
		if !up {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Stop()
}

func speakerConfig(port uint16, mutate ...func(*Config)) Config {
	c := Config{ASN: speakerASN, RouterID: netip.MustParseAddr("192.0.2.2"), Log: quiet,
		NextHop6: netip.MustParseAddr("2001:db8::2"),
		Peers: []PeerConfig{{Address: loRouter, ASN: routerASN, Port: port, LocalAddress: loSpeaker,
			HoldTime: 3 * time.Second, KeepaliveInterval: time.Second, ConnectRetry: time.Second,
			Families: []Family{IPv4Unicast, IPv6Unicast}}}}
	for _, m := range mutate {
		m(&c)
	}
	return c
}

func startSpeaker(t *testing.T, cfg Config) *Speaker {
	t.Helper()
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// eventually polls cond until it holds (up to waitLimit).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitPeerState(t *testing.T, s *Speaker, want SessionState) PeerStatus {
	t.Helper()
	var ps PeerStatus
	eventually(t, "peer "+string(want), func() (bool, string) {
		st, err := s.Status(context.Background())
		if err != nil || len(st.Peers) != 1 {
			return false, err.Error()
		}
		ps = st.Peers[0]
		return ps.State == want, string(ps.State)
	})
	return ps
}

// learned returns what the router has from the speaker, one line per
// path: "prefix nexthop=… aspath=… med=… lp=… comm=… large=…".
func learned(t *testing.T, r *server.BgpServer) []string {
	t.Helper()
	return routerPaths(t, r, func(prefix string, p *api.Path) string { return prefix + describe(t, p) })
}

// routerPaths lists the router's paths of both families, one line each as
// line makes it of the path's prefix and the path, sorted.
func routerPaths(t *testing.T, r *server.BgpServer, line func(prefix string, p *api.Path) string) []string {
	t.Helper()
	// GoBGP v3 writes a re-established peer's AS and ID into the record its
	// held paths point to under the session's lock, and ListPath reads them
	// without it (osrg/gobgp#2705, gone in v4): listing the peers first
	// takes that lock, so a write before it is ordered before the read and
	// the race detector sees no race but a write in the instant between.
	if err := r.ListPeer(context.Background(), &api.ListPeerRequest{}, func(*api.Peer) {}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range []Family{IPv4Unicast, IPv6Unicast} {
		err := r.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: apiFamily(f)},
			func(d *api.Destination) {
				for _, p := range d.Paths {
					out = append(out, line(d.Prefix, p))
				}
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

func describe(t *testing.T, p *api.Path) string {
	attrs, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, a := range attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			fields["nexthop"] = a.Value.String()
		case *bgp.PathAttributeMpReachNLRI:
			fields["nexthop"] = a.Nexthop.String()
		case *bgp.PathAttributeAsPath:
			var asns []string
			for _, seg := range a.Value {
				for _, asn := range seg.GetAS() {
					asns = append(asns, fmt.Sprint(asn))
				}
			}
			fields["aspath"] = strings.Join(asns, ",")
		case *bgp.PathAttributeMultiExitDisc:
			fields["med"] = fmt.Sprint(a.Value)
		case *bgp.PathAttributeLocalPref:
			fields["lp"] = fmt.Sprint(a.Value)
		case *bgp.PathAttributeCommunities:
			var cs []string
			for _, c := range a.Value {
				cs = append(cs, Community(c).String())
			}
			fields["comm"] = strings.Join(cs, ",")
		case *bgp.PathAttributeLargeCommunities:
			var cs []string
			for _, c := range a.Values {
				cs = append(cs, c.String())
			}
			fields["large"] = strings.Join(cs, ",")
		}
	}
	var b strings.Builder
	for _, k := range []string{"nexthop", "aspath", "med", "lp", "comm", "large"} {
		if v, ok := fields[k]; ok {
			b.WriteString(" " + k + "=" + v)
		}
	}
	return b.String()
}

func waitLearned(t *testing.T, r *server.BgpServer, want []string) {
	t.Helper()
	eventually(t, "router learns "+strings.Join(want, ", "), func() (bool, string) {
		got := learned(t, r)
		return slices.Equal(got, want), strings.Join(got, "; ")
	})
}

func TestSpeakerAnnouncesAndWithdrawsOverEBGP(t *testing.T) {
	port := freePort(t)
	router := startRouter(t, port, speakerASN, "")
	s := startSpeaker(t, speakerConfig(port))
	waitPeerState(t, s, StateEstablished)
	ctx := context.Background()

	med := uint32(50)
	vip := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32"), MED: &med,
		Communities: []Community{65001<<16 | 100}, LargeCommunities: []LargeCommunity{{ASN: 65001, Local1: 1, Local2: 2}}}
	vip6 := Route{Prefix: netip.MustParsePrefix("2001:db8::10/128")}
	if err := s.SetRoutes(ctx, []Route{vip, vip6}); err != nil {
		t.Fatal(err)
	}
	waitLearned(t, router, []string{
		"192.0.2.10/32 nexthop=127.0.0.2 aspath=65001 med=50 comm=65001:100 large=65001:1:2",
		"2001:db8::10/128 nexthop=2001:db8::2 aspath=65001",
	})

	// De-prefer instead of withdrawing: prepend twice, no MED.
	vip.MED, vip.ASPathPrepend = nil, 2
	if err := s.SetRoutes(ctx, []Route{vip, vip6}); err != nil {
		t.Fatal(err)
	}
	waitLearned(t, router, []string{
		"192.0.2.10/32 nexthop=127.0.0.2 aspath=65001,65001,65001 comm=65001:100 large=65001:1:2",
		"2001:db8::10/128 nexthop=2001:db8::2 aspath=65001",
	})

	// Declarative: leaving vip6 out withdraws it; an invalid set changes nothing.
	if err := s.SetRoutes(ctx, []Route{vip, {Prefix: netip.MustParsePrefix("192.0.2.99/24")}}); err == nil {
		t.Fatal("invalid set accepted")
	}
	if err := s.SetRoutes(ctx, []Route{vip}); err != nil {
		t.Fatal(err)
	}
	waitLearned(t, router, []string{"192.0.2.10/32 nexthop=127.0.0.2 aspath=65001,65001,65001 comm=65001:100 large=65001:1:2"})

	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || st.Routes[0].Prefix != vip.Prefix || st.Peers[0].Announced != 1 ||
		st.Peers[0].Established.IsZero() || st.Peers[0].BFD != "" {
		t.Errorf("status %+v", st)
	}

	if err := s.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	// Withdraw returned once the UPDATE was written; the router may
	// still be reading it.
	waitLearned(t, router, nil)
	if err := s.Withdraw(ctx); err != nil {
		t.Errorf("withdrawing nothing: %v", err)
	}
}

func TestSpeakerIBGPLocalPref(t *testing.T) {
	port := freePort(t)
	router := startRouter(t, port, routerASN, "")
	s := startSpeaker(t, speakerConfig(port, func(c *Config) { c.ASN = routerASN }))
	waitPeerState(t, s, StateEstablished)
	if err := s.SetRoutes(context.Background(), []Route{{Prefix: netip.MustParsePrefix("192.0.2.10/32"), LocalPref: 200}}); err != nil {
		t.Fatal(err)
	}
	waitLearned(t, router, []string{"192.0.2.10/32 nexthop=127.0.0.2 aspath= lp=200"})
}

func TestSpeakerBFDCoupling(t *testing.T) {
	port := freePort(t)
	router := startRouter(t, port, speakerASN, "")
	fb := bfd.NewFake()
	s := startSpeaker(t, speakerConfig(port, func(c *Config) {
		c.BFD = fb
		c.Peers[0].BFD = true
	}))
	if ops := fb.Ops(); len(ops) != 0 {
		t.Fatalf("BFD started before BGP was established: %v", ops)
	}
	st, _ := s.Status(context.Background())
	if st.Peers[0].BFD != BFDIdle {
		t.Errorf("BFD before BGP: %q", st.Peers[0].BFD)
	}
	waitPeerState(t, s, StateEstablished)
	eventually(t, "BFD started after BGP", func() (bool, string) {
		return slices.Equal(fb.Ops(), []string{"add 127.0.0.1"}), strings.Join(fb.Ops(), ",")
	})
	fb.SetState(loRouter, bfd.Up, bfd.DiagNone, bfd.Up)
	eventually(t, "status shows BFD up", func() (bool, string) {
		st, _ := s.Status(context.Background())
		return st.Peers[0].BFD == "up", st.Peers[0].BFD
	})

	// A short loss (BFD back Up within bfdHoldDelay) costs no BGP session:
	// at the hold's due time BFD is Up, whenever that is.
	fb.SetState(loRouter, bfd.Down, bfd.DiagDetectionExpired, bfd.Up)
	fb.SetState(loRouter, bfd.Up, bfd.DiagNone, bfd.Up)
	time.Sleep(bfdHoldDelay + 500*time.Millisecond)
	if st, _ := s.Status(context.Background()); st.Peers[0].State != StateEstablished || st.Peers[0].Flaps != 0 ||
		st.Peers[0].BFDDowns != 1 {
		t.Fatalf("after a short BFD loss: %+v", st.Peers[0])
	}

	// The link fails: BFD times out, the session is taken down and held.
	fb.SetState(loRouter, bfd.Down, bfd.DiagDetectionExpired, bfd.Up)
	ps := waitPeerState(t, s, StateIdle)
	if !ps.HeldDown || ps.Flaps != 1 || !strings.Contains(ps.LastFlapReason, "bfd down (control-detection-time-expired)") ||
		ps.BFD != "down" || ps.BFDDowns != 2 {
		t.Errorf("after BFD down: %+v", ps)
	}
	// BFD up again releases it; GoBGP dials after its idle hold (1 s).
	fb.SetState(loRouter, bfd.Up, bfd.DiagNone, bfd.Up)
	ps = waitPeerState(t, s, StateEstablished)
	if ps.HeldDown || ps.BFD != "up" || len(fb.Ops()) != 1 {
		t.Errorf("after BFD up: %+v, BFD ops %v", ps, fb.Ops())
	}

	// BGP lost for another reason (the router went away): the BFD session
	// stops and starts again with the next established session.
	err := router.DeletePeer(context.Background(), &api.DeletePeerRequest{Address: loSpeaker.String()})
	if err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, s, StateActive)
	eventually(t, "BFD stopped with BGP", func() (bool, string) {
		return slices.Equal(fb.Ops(), []string{"add 127.0.0.1", "remove 127.0.0.1"}), strings.Join(fb.Ops(), ",")
	})
	st, _ = s.Status(context.Background())
	if st.Peers[0].HeldDown || st.Peers[0].BFD != BFDIdle {
		t.Errorf("after the router left: %+v", st.Peers[0])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRoutes(ctx, nil); err != ErrClosed {
		t.Errorf("SetRoutes after Close: %v", err)
	}
}

func TestSpeakerHintsAtTCPMD5Failures(t *testing.T) {
	port := freePort(t)
	startRouter(t, port, speakerASN, "right")
	rec := &logRecorder{}
	counter := uint64(0)
	startSpeaker(t, speakerConfig(port, func(c *Config) {
		c.Log = slog.New(rec)
		c.MD5Hint = time.Millisecond
		c.Peers[0].Password = "wrong"
		c.netstat = func() ([]byte, error) {
			counter += 3 // the kernel drops our SYNs: a wrong signature each
			return fmt.Appendf(nil, "TcpExt: TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure\nTcpExt: 0 0 %d\n", counter), nil
		}
	}))
	eventually(t, "hint logged", func() (bool, string) {
		l := rec.find("no BGP session with 127.0.0.1")
		return l != "", ""
	})
	l := rec.find("no BGP session with 127.0.0.1")
	if !strings.Contains(l, "TCP-MD5 failures: check the password") || !strings.HasPrefix(l, "WARN") {
		t.Errorf("hint %q", l)
	}
}

var _ gobgplog.Logger = (*gobgpLogger)(nil)

// TestSpeakerReconcilesAdminState: GoBGP drops an enable or disable that
// arrives while the previous one is pending, so the speaker puts the admin
// state right every second. A peer disabled behind its back comes back.
func TestSpeakerReconcilesAdminState(t *testing.T) {
	port := freePort(t)
	startRouter(t, port, speakerASN, "")
	s := startSpeaker(t, speakerConfig(port))
	waitPeerState(t, s, StateEstablished)
	if err := s.srv.DisablePeer(context.Background(), &api.DisablePeerRequest{Address: loRouter.String()}); err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, s, StateIdle)
	ps := waitPeerState(t, s, StateEstablished)
	if ps.Flaps != 1 || ps.HeldDown {
		t.Errorf("after the stray disable: %+v", ps)
	}
}

// TestSpeakerHintsAtMissingBFD: a router that never brings BFD up gets the
// hint to configure it; a BFD session that was up and drops for a moment
// is a failure, not a configuration to check, and gets none.
func TestSpeakerHintsAtMissingBFD(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cameUp   bool
		wantHint bool
	}{{"never up", false, true}, {"short loss", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			startRouter(t, port, speakerASN, "")
			rec := &logRecorder{}
			fb := bfd.NewFake()
			s := startSpeaker(t, speakerConfig(port, func(c *Config) {
				c.Log = slog.New(rec)
				c.MD5Hint = 2 * time.Second // BFD starts a second after BGP
				c.BFD = fb
				c.Peers[0].BFD = true
			}))
			waitPeerState(t, s, StateEstablished)
			eventually(t, "BFD started after BGP", func() (bool, string) { return len(fb.Ops()) == 1, strings.Join(fb.Ops(), ",") })
			if tc.cameUp {
				fb.SetState(loRouter, bfd.Up, bfd.DiagNone, bfd.Up)
				fb.SetState(loRouter, bfd.Down, bfd.DiagDetectionExpired, bfd.Up)
			}
			time.Sleep(3 * time.Second) // past MD5Hint, and the speaker's one-second tick
			if got := rec.find("but BFD is not up") != ""; got != tc.wantHint {
				t.Errorf("hint logged %t, want %t", got, tc.wantHint)
			}
		})
	}
}
