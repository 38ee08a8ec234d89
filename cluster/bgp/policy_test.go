package bgp

import (
	"context"
	"errors"
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
	"github.com/osrg/gobgp/v3/pkg/server"
)

// A second router, in another AS, to see whether what the first one sends
// is passed on.
var loRouterB = netip.MustParseAddr("127.0.0.3")

const routerBASN = 65002

// sendPrefixes makes the router announce n host routes of 198.18.0.0/15.
func sendPrefixes(t *testing.T, r *server.BgpServer, n int) {
	t.Helper()
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
		path, err := apiPath(Config{}, Route{Prefix: p, NextHop: loRouter})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.AddPath(context.Background(), &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path}); err != nil {
			t.Fatal(err)
		}
	}
}

// pathsIn lists the prefixes of one of a GoBGP's tables: the global RIB
// (from "") or what it received from the neighbour from.
func pathsIn(t *testing.T, s *server.BgpServer, from netip.Addr) []string {
	t.Helper()
	req := &api.ListPathRequest{TableType: api.TableType_GLOBAL}
	if from.IsValid() {
		req = &api.ListPathRequest{TableType: api.TableType_ADJ_IN, Name: from.String()}
	}
	var out []string
	for _, f := range []Family{IPv4Unicast, IPv6Unicast} {
		req.Family = apiFamily(f)
		err := s.ListPath(context.Background(), req, func(d *api.Destination) { out = append(out, d.Prefix) })
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

func peerStatus(t *testing.T, s *Speaker, addr netip.Addr) (Status, PeerStatus) {
	t.Helper()
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		if p.Address == addr {
			return st, p
		}
	}
	t.Fatalf("no peer %s in %+v", addr, st)
	return st, PeerStatus{}
}

func (r *logRecorder) count(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestSpeakerImportsNothing: routes a router sends are counted but never
// imported nor passed to the other router, past max_prefixes too, where
// the speaker warns once and keeps the session.
func TestSpeakerImportsNothing(t *testing.T) {
	cases := []struct {
		name        string
		maxPrefixes uint32
		sent        int
		wantWarning bool
	}{
		{"under the default limit", 0, 60, false},
		{"over max_prefixes: warned, session kept", 20, 60, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			portA, portB := freePort(t), freePort(t)
			routerA := startRouter(t, portA, speakerASN, "")
			routerB := startRouterAt(t, loRouterB, routerBASN, portB, speakerASN, "")
			rec := &logRecorder{}
			s := startSpeaker(t, speakerConfig(portA, func(c *Config) {
				c.Log = slog.New(rec)
				c.Peers[0].MaxPrefixes = tc.maxPrefixes
				c.Peers = append(c.Peers, PeerConfig{Address: loRouterB, ASN: routerBASN, Port: portB, LocalAddress: loSpeaker,
					HoldTime: 3 * time.Second, KeepaliveInterval: time.Second, ConnectRetry: time.Second})
			}))
			vip := netip.MustParsePrefix("192.0.2.10/32")
			if err := s.SetRoutes(context.Background(), []Route{{Prefix: vip}}); err != nil {
				t.Fatal(err)
			}
			sendPrefixes(t, routerA, tc.sent)
			eventually(t, "the speaker counts what router A sent", func() (bool, string) {
				_, p := peerStatus(t, s, loRouter)
				return p.Received == uint64(tc.sent) && p.State == StateEstablished, fmt.Sprintf("%+v", p)
			})
			eventually(t, "router B hears the VIP", func() (bool, string) {
				got := pathsIn(t, routerB, loSpeaker)
				return slices.Equal(got, []string{vip.String()}), strings.Join(got, " ")
			})
			err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
				if p.GetRouteServer().GetRouteServerClient() || p.GetRouteReflector().GetRouteReflectorClient() {
					t.Errorf("peer %s is a route-server or route-reflector client", p.GetConf().GetNeighborAddress())
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := pathsIn(t, s.srv, netip.Addr{}); !slices.Equal(got, []string{vip.String()}) {
				t.Errorf("the speaker's RIB holds %v, want only its VIP", got)
			}
			for name, r := range map[string]*server.BgpServer{"A": routerA, "B": routerB} {
				if got := pathsIn(t, r, loSpeaker); !slices.Equal(got, []string{vip.String()}) {
					t.Errorf("router %s received %v from the speaker, want only its VIP", name, got)
				}
			}
			time.Sleep(2500 * time.Millisecond) // two more checks: the warning is not repeated
			st, p := peerStatus(t, s, loRouter)
			if p.Accepted != 0 || st.Imported != 0 || p.State != StateEstablished || p.Flaps != 0 {
				t.Errorf("status %+v, peer %+v: want nothing imported, the session up", st, p)
			}
			want, breaches := 0, 0
			if tc.wantWarning {
				want, breaches = 1, 1
			}
			line := fmt.Sprintf("router %s sent %d prefixes, more than max_prefixes %d", loRouter, tc.sent, tc.maxPrefixes)
			if got := rec.count(line); got != want || p.PrefixBreaches != breaches {
				t.Errorf("%q logged %d times, breaches %d; want %d, %d", line, got, p.PrefixBreaches, want, breaches)
			}
			if got := rec.find(line); tc.wantWarning && (!strings.HasPrefix(got, "WARN") ||
				!strings.Contains(got, fmt.Sprintf("received=%d", tc.sent)) || !strings.Contains(got, "peer="+loRouter.String())) {
				t.Errorf("logged %q", got)
			}
		})
	}
}

// TestSpeakerClosesAtHardLimit: past hardPrefixFactor × max_prefixes
// GoBGP closes the session and keeps it down; the speaker says so and
// reopens it after prefixLimitRetry.
func TestSpeakerClosesAtHardLimit(t *testing.T) {
	port := freePort(t)
	router := startRouter(t, port, speakerASN, "")
	rec := &logRecorder{}
	s := startSpeaker(t, speakerConfig(port, func(c *Config) {
		c.Log = slog.New(rec)
		c.Peers[0].MaxPrefixes = 1
		c.prefixLimitRetry = time.Second
	}))
	waitPeerState(t, s, StateEstablished)
	sendPrefixes(t, router, hardPrefixFactor+1)
	closed := fmt.Sprintf("BGP session with %s closed: the router sent more than %d prefixes", loRouter, hardPrefixFactor)
	eventually(t, "the speaker logs the close", func() (bool, string) { return rec.find(closed) != "", "" })
	eventually(t, "the speaker reopens the session", func() (bool, string) {
		return rec.find("bgp session reopened after the prefix limit") != "", ""
	})
	_, p := peerStatus(t, s, loRouter)
	if p.Flaps == 0 || p.LastFlapReason != "prefix limit: more than 100 prefixes" || p.PrefixBreaches < 1 {
		t.Errorf("peer %+v: want a flap for the prefix limit, counted as a breach", p)
	}
	if got := rec.find(closed); !strings.HasPrefix(got, "ERROR") || !strings.Contains(got, "hard_limit=100") {
		t.Errorf("logged %q", got)
	}
}

func TestAPIGlobalListener(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	cases := []struct {
		name      string
		addresses []netip.Addr
		port      uint16
		wantPort  int32
		wantAddrs []string
	}{
		{"nothing: dial only", nil, 0, -1, nil},
		{"addresses: on 179 there", []netip.Addr{a, b}, 0, 179, []string{"10.0.0.2", "fd00::2"}},
		{"addresses and port", []netip.Addr{a}, 1179, 1179, []string{"10.0.0.2"}},
		{"port alone: every address, as before", nil, 179, 179, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 65000})
			c.ListenAddresses, c.ListenPort = tc.addresses, tc.port
			c, err := c.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			g := apiGlobal(c)
			if g.ListenPort != tc.wantPort || !slices.Equal(g.ListenAddresses, tc.wantAddrs) {
				t.Errorf("listen port %d on %v, want %d on %v", g.ListenPort, g.ListenAddresses, tc.wantPort, tc.wantAddrs)
			}
		})
	}
}

// TestSpeakerListensWhereConfigured: with listen addresses the speaker
// accepts the router's session there, nowhere else, and closes a
// connection from an address it has no peer for without a word.
func TestSpeakerListensWhereConfigured(t *testing.T) {
	listen, closedPort := freePort(t), freePort(t)
	// The router only dials, to the speaker's listener; the speaker's own
	// dials go to a closed port.
	router := server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: quiet}))
	go router.Serve()
	ctx := context.Background()
	if err := router.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: routerASN, RouterId: loRouter.String(), ListenPort: -1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRouter(router) })
	err := router.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: loSpeaker.String(), PeerAsn: speakerASN},
		Transport: &api.Transport{RemotePort: uint32(listen), LocalAddress: loRouter.String()},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSpeaker(t, speakerConfig(closedPort, func(c *Config) {
		c.ListenAddresses, c.ListenPort = []netip.Addr{loSpeaker}, listen
		c.Peers[0].Families = nil
	}))
	waitPeerState(t, s, StateEstablished)

	d := net.Dialer{Timeout: time.Second}
	for _, a := range []netip.Addr{loRouter, loRouterB} {
		if c, err := d.Dial("tcp", netip.AddrPortFrom(a, listen).String()); err == nil {
			c.Close()
			t.Errorf("something listens on %s:%d", a, listen)
		}
	}
	stranger := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
	c, err := stranger.Dial("tcp", netip.AddrPortFrom(loSpeaker, listen).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(fmt.Sprint(err), "reset")) {
		t.Errorf("a connection from an unknown address read %d bytes, %v; want it closed", n, err)
	}
	st, err := s.Status(ctx)
	if err != nil || len(st.ListenAddresses) != 1 || st.ListenPort != listen {
		t.Errorf("status %+v, %v", st, err)
	}
}
