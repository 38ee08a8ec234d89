package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// startHelperRouter is startRouter with graceful restart (helper): it
// keeps a restarting speaker's paths as stale, as FRR does by default.
func startHelperRouter(t *testing.T, port uint16) *server.BgpServer {
	t.Helper()
	r := server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: quiet}))
	go r.Serve()
	ctx := context.Background()
	err := r.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: routerASN, RouterId: loRouter.String(),
		ListenPort: int32(port), ListenAddresses: []string{loRouter.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	var afs []*api.AfiSafi
	for _, f := range []Family{IPv4Unicast, IPv6Unicast} {
		afs = append(afs, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: apiFamily(f), Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}})
	}
	err = r.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: loSpeaker.String(), PeerAsn: speakerASN},
		Transport:       &api.Transport{PassiveMode: true},
		GracefulRestart: &api.GracefulRestart{Enabled: true, HelperOnly: true},
		AfiSafis:        afs,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRouter(r) })
	return r
}

// held returns the router's paths from the speaker: "prefix" or
// "prefix stale".
func held(t *testing.T, r *server.BgpServer) []string {
	t.Helper()
	return routerPaths(t, r, func(prefix string, p *api.Path) string {
		if p.Stale {
			return prefix + " stale"
		}
		return prefix
	})
}

func waitHeld(t *testing.T, r *server.BgpServer, want ...string) {
	t.Helper()
	eventually(t, "router holds "+strings.Join(want, ", "), func() (bool, string) {
		got := held(t, r)
		return slices.Equal(got, want), strings.Join(got, "; ")
	})
}

// keepsHolding checks that the router holds want all through d.
func keepsHolding(t *testing.T, r *server.BgpServer, d time.Duration, want ...string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := held(t, r); !slices.Equal(got, want) {
			t.Fatalf("router holds %q, want %q", got, want)
		}
	}
}

func routerSessions(t *testing.T, r *server.BgpServer) api.PeerState_SessionState {
	t.Helper()
	var st api.PeerState_SessionState
	if err := r.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		st = p.GetState().GetSessionState()
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitRouterListening waits until the test router accepts the speaker
// again: GoBGP idles 5 s after a session went down and closes what
// arrives meanwhile, after which the speaker idles 5 s in turn (FRR
// accepts at once).
func waitRouterListening(t *testing.T, r *server.BgpServer) {
	t.Helper()
	eventually(t, "router accepts again", func() (bool, string) {
		st := routerSessions(t, r)
		return st == api.PeerState_ACTIVE, st.String()
	})
}

// timedBFD is a bfd.Fake that records when each session was removed.
type timedBFD struct {
	*bfd.Fake
	mu      sync.Mutex
	removed []time.Time
}

func (b *timedBFD) RemovePeer(ctx context.Context, addr netip.Addr) error {
	b.mu.Lock()
	b.removed = append(b.removed, time.Now())
	b.mu.Unlock()
	return b.Fake.RemovePeer(ctx, addr)
}

func (b *timedBFD) removals() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.removed)
}

func withGR(restart time.Duration) func(*Config) {
	return func(c *Config) { c.GracefulRestart = GracefulRestart{Enabled: true, RestartTime: restart} }
}

var (
	grVIP  = Route{Prefix: netip.MustParsePrefix("192.0.2.10/32")}
	grVIP2 = Route{Prefix: netip.MustParsePrefix("192.0.2.11/32")}
)

// What each way of stopping leaves at a router that helps with graceful
// restart.
func TestSpeakerStopsWithGracefulRestart(t *testing.T) {
	for _, c := range []struct {
		name       string
		gr         bool
		forRestart bool
		want       []string // right after the stop, and for a second
	}{
		{"for a restart: the paths stay, stale", true, true, []string{"192.0.2.10/32 stale", "192.0.2.11/32 stale"}},
		{"plain stop: withdrawn, Cease", true, false, nil},
		{"for a restart without graceful restart: as a plain stop", false, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(t)
			router := startHelperRouter(t, port)
			mutate := func(*Config) {}
			if c.gr {
				mutate = withGR(30 * time.Second)
			}
			fb := &timedBFD{Fake: bfd.NewFake()}
			s, err := Start(context.Background(), speakerConfig(port, mutate, func(c *Config) {
				c.BFD, c.Peers[0].BFD = fb, true
			}))
			if err != nil {
				t.Fatal(err)
			}
			waitPeerState(t, s, StateEstablished)
			eventually(t, "BFD started", func() (bool, string) {
				return len(fb.Ops()) == 1, strings.Join(fb.Ops(), ",")
			})
			if err := s.SetRoutes(context.Background(), []Route{grVIP, grVIP2}); err != nil {
				t.Fatal(err)
			}
			waitHeld(t, router, "192.0.2.10/32", "192.0.2.11/32")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			closing := time.Now()
			if c.forRestart {
				err = s.CloseForRestart(ctx)
			} else {
				err = s.Close(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			// BFD goes AdminDown once, and for a restart only after the
			// pause that lets the router see the sessions close first.
			removed := fb.removals()
			if len(removed) != 1 {
				t.Fatalf("BFD removed %d times, want once", len(removed))
			}
			if after := removed[0].Sub(closing); c.gr && c.forRestart && after < bfdAfterAbort {
				t.Errorf("BFD taken down %v after the close began, before the sessions had %v to end", after, bfdAfterAbort)
			}
			waitHeld(t, router, c.want...)
			keepsHolding(t, router, time.Second, c.want...)
		})
	}
}

// The next speaker opens its sessions as the restarting one only once its
// routes are in: its End-of-RIB then follows them, and the router drops
// just the stale paths it did not announce again.
func TestSpeakerRestartsGracefully(t *testing.T) {
	port := freePort(t)
	router := startHelperRouter(t, port)
	first, err := Start(context.Background(), speakerConfig(port, withGR(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, first, StateEstablished)
	if err := first.SetRoutes(context.Background(), []Route{grVIP, grVIP2}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, router, "192.0.2.10/32", "192.0.2.11/32")
	if err := first.CloseForRestart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, router, "192.0.2.10/32 stale", "192.0.2.11/32 stale")
	waitRouterListening(t, router)

	next := startSpeaker(t, speakerConfig(port, withGR(30*time.Second), func(c *Config) { c.Restarting = true }))
	// No session before the routes: an End-of-RIB now would drop them all.
	keepsHolding(t, router, 1500*time.Millisecond, "192.0.2.10/32 stale", "192.0.2.11/32 stale")
	if st := routerSessions(t, router); st == api.PeerState_ESTABLISHED {
		t.Fatal("the restarting speaker opened its session before it had routes")
	}
	// The status says the router keeps the paths, until when, and when
	// the sessions open at the latest.
	st, err := next.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g := st.GracefulRestart; g == nil || !g.Restarted || g.RestartTime != 30*time.Second || g.OpenBy.IsZero() ||
		!g.OpenedAt.IsZero() || time.Until(g.StaleUntil) < 25*time.Second {
		t.Fatalf("graceful restart in the status before the routes: %+v", g)
	}
	if !st.Peers[0].KeepsStalePaths {
		t.Fatalf("the status does not say the router keeps the paths: %+v", st.Peers[0])
	}
	if err := next.SetRoutes(context.Background(), []Route{grVIP}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, router, "192.0.2.10/32")
	waitPeerState(t, next, StateEstablished)
	if st, err = next.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g := st.GracefulRestart; !g.Restarted || !g.OpenBy.IsZero() || g.OpenedAt.IsZero() || st.Peers[0].KeepsStalePaths {
		t.Fatalf("graceful restart in the status once the session is back: %+v, router %+v", g, st.Peers[0])
	}
}

// A restarting speaker that gets no routes opens its sessions before the
// routers' restart time runs out; its End-of-RIB clears the stale paths.
func TestSpeakerRestartingOpensAtDeadline(t *testing.T) {
	port := freePort(t)
	router := startHelperRouter(t, port)
	restart := restartOpenMargin + 2*time.Second // the deadline is 2 s after the start
	first, err := Start(context.Background(), speakerConfig(port, withGR(restart)))
	if err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, first, StateEstablished)
	if err := first.SetRoutes(context.Background(), []Route{grVIP}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, router, "192.0.2.10/32")
	if err := first.CloseForRestart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitRouterListening(t, router)
	start := time.Now()
	next := startSpeaker(t, speakerConfig(port, withGR(restart), func(c *Config) { c.Restarting = true }))
	waitPeerState(t, next, StateEstablished)
	if waited := time.Since(start); waited < 2*time.Second {
		t.Errorf("sessions opened %v after the start, before the deadline", waited)
	}
	waitHeld(t, router)
}

func TestGracefulRestartConfig(t *testing.T) {
	for _, c := range []struct {
		name    string
		gr      GracefulRestart
		want    time.Duration
		wantErr string
	}{
		{"off: nothing checked", GracefulRestart{RestartTime: -time.Second}, -time.Second, ""},
		{"default restart time", GracefulRestart{Enabled: true}, DefaultRestartTime, ""},
		{"given", GracefulRestart{Enabled: true, RestartTime: 120 * time.Second}, 120 * time.Second, ""},
		{"fraction", GracefulRestart{Enabled: true, RestartTime: 1500 * time.Millisecond}, 0, "must be whole seconds"},
		{"too long", GracefulRestart{Enabled: true, RestartTime: MaxRestartTime + time.Second}, 0, "more than the capability's 1h8m15s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(PeerConfig{Address: netip.MustParseAddr("10.0.0.10"), ASN: 65000})
			cfg.GracefulRestart = c.gr
			got, err := cfg.withDefaults()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GracefulRestart.RestartTime != c.want {
				t.Errorf("restart time %v, want %v", got.GracefulRestart.RestartTime, c.want)
			}
		})
	}
}

// The capability on the wire: Restart State and Forwarding State only
// when restarting; no N bit, so a Cease is never a graceful restart.
func TestAPIPeerGracefulRestart(t *testing.T) {
	p := PeerConfig{Address: netip.MustParseAddr("10.0.0.10"), ASN: 65000, Families: []Family{IPv4Unicast, IPv6Unicast}}
	gr := GracefulRestart{Enabled: true, RestartTime: 30 * time.Second}
	for _, c := range []struct {
		name       string
		gr         GracefulRestart
		restarting bool
	}{{"off", GracefulRestart{}, false}, {"on", gr, false}, {"restarting", gr, true}} {
		t.Run(c.name, func(t *testing.T) {
			peer := apiPeer(p, c.gr, c.restarting)
			g := peer.GracefulRestart
			if !c.gr.Enabled {
				if g != nil || peer.AfiSafis[0].MpGracefulRestart != nil {
					t.Fatalf("capability without graceful restart: %v", g)
				}
				return
			}
			if !g.Enabled || g.RestartTime != 30 || g.LocalRestarting != c.restarting || g.NotificationEnabled ||
				g.LonglivedEnabled || g.HelperOnly {
				t.Errorf("capability %v", g)
			}
			for _, af := range peer.AfiSafis {
				if !af.GetMpGracefulRestart().GetConfig().GetEnabled() {
					t.Errorf("family %v without graceful restart", af.Config.Family)
				}
			}
		})
	}
}
