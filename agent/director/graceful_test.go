package director

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// A director started after a stop under a restart hold, with graceful
// restart on, starts its speaker as the restarting one: the status says
// its routers keep its old paths until its sessions open, which they do
// with its first announcement. A plain start says graceful restart is on
// and nothing more.
func TestRunStatusGracefulRestart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		held      bool // the previous process stopped under a restart hold
		restarted bool
	}{
		{"after a stop under a restart hold", true, true},
		{"a plain start", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// ecmpConfig's files, with graceful restart on.
			dir, _ := ecmpConfig(t, "conn_sync: {enabled: false}", "service: web\nvip: 192.0.2.10\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
			path := filepath.Join(dir, "lvsd.yaml")
			text, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(path, []byte(strings.Replace(string(text), "stop_grace: 10ms}",
				"stop_grace: 10ms, graceful_restart: {restart_time: 30s}}", 1)), 0o600))
			cfg, err := agent.LoadConfig(path)
			must(t, err)
			if tc.held {
				must(t, os.MkdirAll(cfg.Agent.StateDir, 0o755))
				must(t, statefile.Save(cfg.Agent.StateDir, restartHoldFile, restartHoldRecord{Until: time.Now().Add(20 * time.Second)}))
			}
			ev := &events{}
			addrs := arp.NewFakeExpiring("eth0", "lo")
			must(t, addrs.Fake.Add(context.Background(), "eth0", netip.MustParsePrefix("10.0.0.2/24")))
			ipvsFake := ipvs.NewFake()
			f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1}, netip.MustParseAddr("192.0.2.10"))
			o := Options{
				ConfigPath: path, Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Kernel: agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctl.NewFake(nil),
					Addrs: addrs, Announcer: &arp.FakeAnnouncer{}},
				Leases:       recordingAddrs{addrs, ev},
				StartCluster: func(cluster.Config) (Node, error) { return fakeNode{f.Add("d1", 100), ev}, nil },
			}
			var configs []bgp.Config
			var started <-chan fakeSpeaker
			o.StartBGP, started = fakeBGP(ev, func(c bgp.Config) { configs = append(configs, c) })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- Run(ctx, o) }()
			speaker := <-started
			if configs[0].Restarting != tc.restarted || !configs[0].GracefulRestart.Enabled {
				t.Fatalf("speaker config: restarting %t, graceful restart %+v; want restarting %t", configs[0].Restarting,
					configs[0].GracefulRestart, tc.restarted)
			}
			eventually(t, "the VIP announced", func() bool { return routeList(speaker.Routes()) == "[192.0.2.10/32]" })
			// The status answers once the first pass is over.
			var st views.Status
			client := api.NewClient(cfg.Agent.APISocket)
			eventually(t, "the status", func() bool { return client.Do(ctx, "GET", views.RouteStatus, &st) == nil && st.BGP != nil })
			// OpenedAt: the restarting speaker held its sessions back and
			// opened them with the first routes.
			g := st.BGP.GracefulRestart
			if g == nil || g.RestartTime != 30*time.Second || g.Restarted != tc.restarted || g.OpenedAt.IsZero() != !tc.restarted ||
				!g.OpenBy.IsZero() || st.BGP.Peers[0].KeepsStalePaths || st.BGP.Peers[0].State != bgp.StateEstablished {
				t.Errorf("lvsd status once announced: graceful restart %+v, router %+v", g, st.BGP.Peers[0])
			}
			cancel()
			must(t, <-done)
		})
	}
}
