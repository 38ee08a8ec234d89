package bgp

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	cfg := baseConfig(PeerConfig{Address: routerA, ASN: 65000, BFD: true}, PeerConfig{Address: routerB, ASN: 65000})
	f, err := NewFake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vip := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32")}
	vip2 := Route{Prefix: netip.MustParsePrefix("192.0.2.11/32")}
	if err := f.SetRoutes(ctx, []Route{vip, vip2}); err != nil {
		t.Fatal(err)
	}
	vip.ASPathPrepend = 3
	if err := f.SetRoutes(ctx, []Route{vip}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRoutes(ctx, []Route{{Prefix: netip.MustParsePrefix("2001:db8::1/128")}}); err == nil {
		t.Error("a family no peer carries was accepted")
	}
	boom := errors.New("boom")
	f.FailNext(boom)
	if err := f.SetRoutes(ctx, nil); !errors.Is(err, boom) {
		t.Errorf("FailNext: %v", err)
	}
	f.SetPeer(routerB, StateActive, "", "hold-timer-expired")
	st, _ := f.Status(ctx)
	if len(st.Peers) != 2 || st.Peers[0].Announced != 1 || st.Peers[0].BFD != "up" || st.Peers[1].Announced != 0 ||
		st.Peers[1].Flaps != 1 || st.Peers[1].LastFlapReason != "hold-timer-expired" || len(st.Routes) != 1 {
		t.Errorf("status %+v", st)
	}
	if err := f.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"announce 192.0.2.10/32", "announce 192.0.2.11/32", "withdraw 192.0.2.11/32",
		"announce 192.0.2.10/32 prepend 3", "withdraw 192.0.2.10/32"}
	if got := f.Ops(); !slices.Equal(got, want) {
		t.Errorf("ops\n got %q\nwant %q", got, want)
	}
	if len(f.Routes()) != 0 {
		t.Error("routes left after Withdraw")
	}
}

// The Fake stops as the Speaker does: Close withdraws, CloseForRestart
// with graceful restart leaves the routes announced, without it closes;
// a closed Fake refuses routes.
func TestFakeStops(t *testing.T) {
	vip := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32")}
	for _, c := range []struct {
		name       string
		gr         bool
		forRestart bool
		ops        []string
		routesLeft int
		reason     string
	}{
		{"for a restart: the routes stay", true, true, []string{"announce 192.0.2.10/32", "close for restart"}, 1, "closed for a restart"},
		{"plain stop: withdrawn", true, false, []string{"announce 192.0.2.10/32", "withdraw 192.0.2.10/32", "close"}, 0,
			"notification-sent cease/peer-deconfigured"},
		{"for a restart without graceful restart: a plain stop", false, true,
			[]string{"announce 192.0.2.10/32", "withdraw 192.0.2.10/32", "close"}, 0, "notification-sent cease/peer-deconfigured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(PeerConfig{Address: routerA, ASN: 65000})
			cfg.GracefulRestart.Enabled = c.gr
			f, err := NewFake(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := f.SetRoutes(ctx, []Route{vip}); err != nil {
				t.Fatal(err)
			}
			if c.forRestart {
				err = f.CloseForRestart(ctx)
			} else {
				err = f.Close(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Ops(); !slices.Equal(got, c.ops) {
				t.Errorf("ops %q, want %q", got, c.ops)
			}
			st, _ := f.Status(ctx)
			if len(st.Routes) != c.routesLeft || st.Peers[0].State != StateIdle || st.Peers[0].LastFlapReason != c.reason {
				t.Errorf("status after the stop: %+v", st)
			}
			if err := f.SetRoutes(ctx, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("SetRoutes after the stop: %v, want ErrClosed", err)
			}
		})
	}
}

// A Fake started after a stop for a restart keeps its sessions closed
// until its first routes, its routers keeping the old paths meanwhile as
// the status says; without graceful restart it starts as any other.
func TestFakeRestarting(t *testing.T) {
	vip := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32")}
	ctx := context.Background()
	cfg := baseConfig(PeerConfig{Address: routerA, ASN: 65000, BFD: true})
	cfg.GracefulRestart, cfg.Restarting = GracefulRestart{Enabled: true, RestartTime: 30 * time.Second}, true
	f, err := NewFake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Status(ctx)
	g := st.GracefulRestart
	if g == nil || !g.Restarted || g.RestartTime != 30*time.Second || g.OpenBy.IsZero() || !g.OpenedAt.IsZero() ||
		g.StaleUntil.Sub(g.OpenBy) != restartOpenMargin {
		t.Fatalf("graceful restart before the routes: %+v", g)
	}
	if p := st.Peers[0]; p.State != StateIdle || !p.KeepsStalePaths || p.BFD != "" {
		t.Fatalf("router before the routes: %+v, want idle, keeping the old paths", p)
	}
	if err := f.SetRoutes(ctx, nil); err != nil || len(f.Ops()) != 0 {
		t.Fatalf("no routes opened the sessions: %v, %q", err, f.Ops())
	}
	if err := f.SetRoutes(ctx, []Route{vip}); err != nil {
		t.Fatal(err)
	}
	st, _ = f.Status(ctx)
	if g := st.GracefulRestart; !g.Restarted || !g.OpenBy.IsZero() || g.OpenedAt.IsZero() {
		t.Errorf("graceful restart once open: %+v", g)
	}
	if p := st.Peers[0]; p.State != StateEstablished || p.KeepsStalePaths || p.BFD != "up" || p.Announced != 1 {
		t.Errorf("router once open: %+v", p)
	}
	want := []string{"announce 192.0.2.10/32", "open sessions as the restarting speaker"}
	if got := f.Ops(); !slices.Equal(got, want) {
		t.Errorf("ops %q, want %q", got, want)
	}

	cfg.GracefulRestart.Enabled = false
	plain, err := NewFake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := plain.Status(ctx); st.GracefulRestart != nil || st.Peers[0].State != StateEstablished || st.Peers[0].KeepsStalePaths {
		t.Errorf("restarting without graceful restart: %+v", st)
	}
}
