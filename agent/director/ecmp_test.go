package director

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// fakeSpeaker is a bgp.Fake that records its Close.
type fakeSpeaker struct {
	*bgp.Fake
	ev *events
}

func (s fakeSpeaker) Close(context.Context) error {
	s.ev.add("speaker closed, routes " + routeList(s.Routes()))
	return nil
}

func routeList(rs []bgp.Route) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Prefix.String())
	}
	return "[" + strings.Join(out, " ") + "]"
}

// A director in mode ecmp puts its VIP on lo and announces it once
// programmed, withdraws it when drained and announces it again when
// undrained, and at a stop withdraws before anything else goes.
func TestRunECMP(t *testing.T) {
	dir, cfg := ecmpConfig(t, "conn_sync: {enabled: false}", "service: web\nvip: 192.0.2.10\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
	ev := &events{}
	addrs := arp.NewFakeExpiring("eth0", "lo")
	must(t, addrs.Fake.Add(context.Background(), "eth0", netip.MustParsePrefix("10.0.0.2/24")))
	ipvsFake := ipvs.NewFake()
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1}, netip.MustParseAddr("192.0.2.10"))
	o := Options{
		ConfigPath: filepath.Join(dir, "lvsd.yaml"), Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Kernel: agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctl.NewFake(nil),
			Addrs: addrs, Announcer: &arp.FakeAnnouncer{}},
		Leases:       recordingAddrs{addrs, ev},
		StartCluster: func(cluster.Config) (Node, error) { return fakeNode{f.Add("d1", 100), ev}, nil },
	}
	var started <-chan fakeSpeaker
	o.StartBGP, started = fakeBGP(ev, func(c bgp.Config) {
		if c.RouterID != netip.MustParseAddr("10.0.0.2") {
			t.Errorf("router id %v, want the director's own address", c.RouterID)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	client := api.NewClient(cfg.Agent.APISocket)
	vip := netip.MustParsePrefix("192.0.2.10/32")
	speaker := <-started
	eventually(t, "the VIP on lo and announced", func() bool {
		lo, _ := addrs.List(ctx, "lo")
		return slices.Contains(lo, vip) && routeList(speaker.Routes()) == "[192.0.2.10/32]"
	})
	var st agent.HolderState
	must(t, client.Do(ctx, "POST", views.RouteDrain, &st))
	if !st.Drained || len(speaker.Routes()) != 0 {
		t.Errorf("drained: %+v, routes %v", st, speaker.Routes())
	}
	if lo, _ := addrs.List(ctx, "lo"); !slices.Contains(lo, vip) {
		t.Error("draining took the VIP off lo: established connections would break")
	}
	must(t, client.Do(ctx, "POST", views.RouteUndrain, &st))
	if st.Drained || len(speaker.Routes()) != 1 {
		t.Errorf("undrained: %+v, routes %v", st, speaker.Routes())
	}
	cancel()
	must(t, <-done)
	want := []string{"speaker closed, routes []", "leave", "delete-address 192.0.2.10/32"}
	if got := ev.list(); !slices.Equal(got, want) {
		t.Errorf("stop:\n got %q\nwant %q", got, want)
	}
}

// fakeBGP returns a StartBGP that starts a bgp.Fake (check, if not nil,
// sees its config) whose Close is recorded in ev, and the channel the
// speaker is handed on.
func fakeBGP(ev *events, check func(bgp.Config)) (func(context.Context, bgp.Config) (Speaker, error), <-chan fakeSpeaker) {
	started := make(chan fakeSpeaker, 1)
	return func(_ context.Context, c bgp.Config) (Speaker, error) {
		if check != nil {
			check(c)
		}
		fk, err := bgp.NewFake(c)
		started <- fakeSpeaker{fk, ev}
		return fakeSpeaker{fk, ev}, err
	}, started
}

// ecmpConfig writes director d1's files, in cluster mode ecmp with
// connSync and a bgp block, and the service file web.yaml, and loads them.
func ecmpConfig(t *testing.T, connSync, service string) (string, *agent.LoadedConfig) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "services.d"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "key"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "lvsd.yaml"), []byte("node: d1\ninterface: eth0\nservices_dir: services.d\n"+
		"state_dir: state\napi: {socket: "+filepath.Join(dir, "lvsd.sock")+"}\n"+
		"cluster: {key_file: key, mode: ecmp, "+connSync+"}\n"+
		"bgp: {asn: 65001, peers: [{address: 10.0.0.10, asn: 65000}], stop_grace: 10ms}\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "services.d", "web.yaml"), []byte(service), 0o644))
	cfg, err := agent.LoadConfig(filepath.Join(dir, "lvsd.yaml"))
	must(t, err)
	return dir, cfg
}

// eventually polls cond until it holds (10 s at most).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

var _ = connsync.Config{}

// A FULLNAT director in mode ecmp sources its connections from its own
// addresses of fullnat.per_director, which it puts on its interface and
// announces by ARP (never over BGP); when another director is lost, the
// survivor ranked first takes that one's addresses, and gives them back
// when it returns. Window tracking is off (one direction of a re-hashed
// connection only), and every director's addresses are guarded.
func TestRunECMPFullNAT(t *testing.T) {
	dir, cfg := ecmpConfig(t, "conn_sync: {enabled: true}", "service: web\nvip: 192.0.2.10\nports: [80]\nforwarding: fullnat\n"+
		"backends: [{address: 10.0.0.11}]\nfullnat:\n  per_director:\n    d1: [10.0.0.201]\n    d2: [10.0.0.202, 10.0.0.203]\n")
	ev := &events{}
	addrs := arp.NewFakeExpiring("eth0", "lo")
	must(t, addrs.Fake.Add(context.Background(), "eth0", netip.MustParsePrefix("10.0.0.2/24")))
	ipvsFake, nft, garp := ipvs.NewFake(), nat.NewFake(), &arp.FakeAnnouncer{}
	sysctls := sysctl.NewFake(map[string]string{nat.SysctlTCPBeLiberal: "0"})
	own, other := netip.MustParseAddr("10.0.0.201"), netip.MustParseAddr("10.0.0.202")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1}, netip.MustParseAddr("192.0.2.10"), own, other)
	f.Add("d2", 100)
	o := Options{
		ConfigPath: filepath.Join(dir, "lvsd.yaml"), Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Kernel:       agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nft, Sysctls: sysctls, Addrs: addrs, Announcer: garp},
		Leases:       recordingAddrs{addrs, ev},
		StartCluster: func(cluster.Config) (Node, error) { return fakeNode{f.Add("d1", 100), ev}, nil },
		NewRelay:     func(connsync.Config) (Relay, error) { return fakeRelay{ev}, nil },
	}
	var started <-chan fakeSpeaker
	o.StartBGP, started = fakeBGP(ev, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	speaker := <-started
	on := func(dev string, a netip.Addr) bool {
		ps, _ := addrs.List(ctx, dev)
		return slices.Contains(ps, netip.PrefixFrom(a, 32))
	}
	eventually(t, "the VIP on lo and announced, the own source address on eth0", func() bool {
		return on("lo", netip.MustParseAddr("192.0.2.10")) && on("eth0", own) && routeList(speaker.Routes()) == "[192.0.2.10/32]"
	})
	if on("eth0", other) || f.Owner(other) != "d2" {
		t.Errorf("d2's source address on d1 (owner %q)", f.Owner(other))
	}
	if !slices.Contains(garp.Sent(), "announce eth0 10.0.0.201") {
		t.Errorf("the own source address was not announced by ARP: %v", garp.Sent())
	}
	rs, _ := nft.Current()
	rules := rs.String()
	for _, want := range []string{"snat to 10.0.0.201 persistent", "10.0.0.201-10.0.0.203"} {
		if !strings.Contains(rules, want) {
			t.Errorf("nftables rules lack %q:\n%s", want, rules)
		}
	}
	if v, _ := sysctls.Get(ctx, nat.SysctlTCPBeLiberal); v != "1" {
		t.Errorf("%s = %q, want 1", nat.SysctlTCPBeLiberal, v)
	}
	f.SetUp("d2", false)
	eventually(t, "d2's source addresses taken over", func() bool {
		return on("eth0", other) && on("eth0", other.Next()) && slices.Contains(garp.Sent(), "announce eth0 10.0.0.202")
	})
	if routeList(speaker.Routes()) != "[192.0.2.10/32]" {
		t.Errorf("routes %v: source addresses must not be announced over BGP", speaker.Routes())
	}
	f.SetUp("d2", true)
	eventually(t, "d2's source addresses given back", func() bool { return !on("eth0", other) && f.Owner(other) == "d2" })
	cancel()
	must(t, <-done)
}

// A start that fails after the cluster and the BGP speaker started stops
// them in reverse order: the speaker closes, then the director leaves the
// cluster and its relay stops. Run returns the error.
func TestRunFailedStartStopsInReverse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(o *Options, dir string)
		want  []string
	}{
		{"the local API cannot listen", func(o *Options, dir string) {
			blocker := filepath.Join(dir, "not-a-dir")
			must(t, os.WriteFile(blocker, nil, 0o600))
			o.Config.Agent.APISocket = filepath.Join(blocker, "lvsd.sock")
		}, []string{"speaker closed, routes []", "leave", "relay stopped"}},
		{"the BGP speaker cannot start", func(o *Options, _ string) {
			o.StartBGP = func(context.Context, bgp.Config) (Speaker, error) { return nil, errors.New("no BGP here") }
		}, []string{"leave", "relay stopped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg := ecmpConfig(t, "conn_sync: {enabled: true}", "service: web\nvip: 192.0.2.10\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
			ev := &events{}
			addrs := arp.NewFakeExpiring("eth0", "lo")
			must(t, addrs.Fake.Add(context.Background(), "eth0", netip.MustParsePrefix("10.0.0.2/24")))
			ipvsFake := ipvs.NewFake()
			f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1}, netip.MustParseAddr("192.0.2.10"))
			o := Options{
				ConfigPath: filepath.Join(dir, "lvsd.yaml"), Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Kernel: agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctl.NewFake(nil),
					Addrs: addrs, Announcer: &arp.FakeAnnouncer{}},
				Leases:       recordingAddrs{addrs, ev},
				StartCluster: func(cluster.Config) (Node, error) { return fakeNode{f.Add("d1", 100), ev}, nil },
				NewRelay:     func(connsync.Config) (Relay, error) { return fakeRelay{ev}, nil },
			}
			o.StartBGP, _ = fakeBGP(ev, nil)
			tc.spoil(&o, dir)
			if err := Run(context.Background(), o); err == nil {
				t.Fatal("Run started")
			}
			if got := ev.list(); !slices.Equal(got, tc.want) {
				t.Errorf("stopped:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
