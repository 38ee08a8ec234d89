package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
)

func TestWriteDirectorStatusCluster(t *testing.T) {
	st := directorStatus()
	st.Services = nil
	st.Cluster = &cluster.View{Node: "lvs1", Mode: cluster.ActiveStandby, Encrypted: true, State: "active",
		Quorum: 2, Live: 2, Stalls: 1,
		Members: []cluster.MemberView{
			{Name: "lvs1", Address: "10.0.0.2:7946", Self: true, Priority: 200, Gossip: "alive", Live: true, Ready: true,
				Holds: []string{"10.0.0.50"}},
			{Name: "lvs2", Address: "10.0.0.3:7946", Priority: 100, Gossip: "alive", Live: true, Ready: true},
			{Name: "lvs3", Address: "10.0.0.4:7946", Priority: 100, Gossip: "failed"},
		},
		VIPs: []cluster.VIPView{{VIP: "10.0.0.50", Owner: "lvs1", Held: true, Holders: []string{"lvs1"}}}}
	st.ConnSync = &connsync.Stats{MasterRecords: 120, Pushes: 7, SentRecords: 130, ReplayedRecords: 10, ReceivedRecords: 4,
		AppliedRecords: 4, CacheSize: 100, LastLag: 2100 * time.Microsecond, MaxLag: 41 * time.Millisecond, DroppedInvalid: 1}
	var b bytes.Buffer
	if err := writeDirectorStatus(&b, st, columnsState, statusNow); err != nil {
		t.Fatal(err)
	}
	want := `cluster: active, active-standby, encrypted, quorum 2, 2 live, 1 scheduling stalls
  DIRECTOR     ADDRESS        PRIORITY  GOSSIP  LIVE  READY  HOLDS
  lvs1 (this)  10.0.0.2:7946  200       alive   yes   yes    10.0.0.50
  lvs2         10.0.0.3:7946  100       alive   yes   yes
  lvs3         10.0.0.4:7946  100       failed  no    no
  VIP        OWNER  HELD HERE  CLAIMED BY
  10.0.0.50  lvs1   yes        lvs1

connection sync: 120 records from the kernel (7 pushes), 130 sent (10 replayed), 4 received, 4 applied (0 confirmed in the kernel at start), 100 cached, lag 2ms (max 41ms), 1 dropped

no services configured
`
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("got:\n%s\nwant it to end with:\n%s", b.String(), want)
	}
}

// With identities, the header says so, and names the refused heartbeats.
func TestWriteClusterStatusIdentities(t *testing.T) {
	v := &cluster.View{Node: "lvs1", Mode: cluster.ActiveStandby, Encrypted: true, State: "standby", Quorum: 1, Live: 2,
		IdentitiesEnforced: true, Signed: true, Refused: map[string]uint64{"unknown name": 9, "bad signature": 3}}
	var b bytes.Buffer
	if err := writeClusterStatus(&b, v); err != nil {
		t.Fatal(err)
	}
	want := "cluster: standby, active-standby, encrypted, quorum 1, 2 live, identities enforced, 12 heartbeats refused (3 bad signature, 9 unknown name)\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("got:\n%s\nwant it to start with:\n%s", b.String(), want)
	}
}

// The configuration column, and a line per peer whose services differ.
func TestWriteClusterStatusConfigDrift(t *testing.T) {
	v := &cluster.View{Node: "lvs1", Mode: cluster.ECMP, Encrypted: true, State: "active", Quorum: 1, Live: 3,
		ConfigDigest: "0123456789abcdef0123456789abcdef", ConfigServices: 40,
		Members: []cluster.MemberView{
			{Name: "lvs1", Self: true, Gossip: "alive", Live: true, Ready: true},
			{Name: "lvs2", Gossip: "alive", Live: true, Ready: true, Config: &cluster.ConfigView{Match: cluster.ConfigDifferent,
				Services: []string{"api", "web"}, Differing: 22, Compared: true, FlowsAtRisk: true}},
			{Name: "lvs3", Gossip: "alive", Live: true, Ready: true, Config: &cluster.ConfigView{Match: cluster.ConfigSame}},
			{Name: "lvs4", Gossip: "alive", Live: true, Ready: true, Config: &cluster.ConfigView{Match: cluster.ConfigUnknown}},
			{Name: "lvs5", Gossip: "alive", Live: true, Ready: true, Config: &cluster.ConfigView{Match: cluster.ConfigDifferent,
				Services: []string{"web"}, Differing: 1}},
			{Name: "lvs6", Gossip: "alive", Live: true, Ready: true, Config: &cluster.ConfigView{Match: cluster.ConfigDifferent,
				Services: []string{"web"}, Differing: 1, Compared: true, Held: true}},
		}}
	var b bytes.Buffer
	if err := writeClusterStatus(&b, v); err != nil {
		t.Fatal(err)
	}
	want := `cluster: active, ecmp, encrypted, quorum 1, 3 live
  DIRECTOR     ADDRESS  PRIORITY  GOSSIP  LIVE  READY  CONFIG    HOLDS
  lvs1 (this)           0         alive   yes   yes    01234567
  lvs2                  0         alive   yes   yes    DIFFERS
  lvs3                  0         alive   yes   yes    same
  lvs4                  0         alive   yes   yes    unknown
  lvs5                  0         alive   yes   yes    DIFFERS
  lvs6                  0         alive   yes   yes    DIFFERS
  VIP  OWNER  HELD HERE  CLAIMED BY
  CONFIGURATION DIFFERS from lvs2 in 22 services: api web and 20 more; under ecmp their flows are at risk (a rehashed flow may reach another backend)
  CONFIGURATION DIFFERS from lvs5 in 1 service so far (comparing): web
  CONFIGURATION DIFFERS from lvs6 in 1 service: web; only by the change HELD here, not in force yet: the peer runs what is in force here, no flow is at risk

`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// A director under a restart hold gets a line saying its VIPs stay.
func TestWriteClusterStatusRestartHold(t *testing.T) {
	v := &cluster.View{Node: "lvs2", Mode: cluster.ActiveStandby, Encrypted: true, State: "standby", Quorum: 1, Live: 1,
		Members: []cluster.MemberView{
			{Name: "lvs1", Gossip: "alive", Holds: []string{"10.0.0.50"}, RestartHoldSeconds: 17.4},
			{Name: "lvs2", Self: true, Gossip: "alive", Live: true, Ready: true},
		}}
	var b bytes.Buffer
	if err := writeClusterStatus(&b, v); err != nil {
		t.Fatal(err)
	}
	if want := "  lvs1 is restarting: its VIPs stay where they are for 17s more (restart hold)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("got:\n%s\nwant a line:\n%s", b.String(), want)
	}
}

// The BGP part says whether graceful restart is on and, while a director
// that restarted gracefully starts up, when its sessions open and which
// routers keep its old paths.
func TestWriteBGPStatusGracefulRestart(t *testing.T) {
	started := time.Date(2026, 12, 5, 11, 45, 0, 0, time.UTC)
	r1, r2 := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.11")
	status := func(g *bgp.GracefulRestartStatus, keep1, keep2 bool) *bgp.Status {
		state := func(keep bool) bgp.SessionState {
			if keep {
				return bgp.StateIdle
			}
			return bgp.StateEstablished
		}
		return &bgp.Status{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.2"), GracefulRestart: g,
			Routes: []bgp.Route{{Prefix: netip.MustParsePrefix("192.0.2.10/32")}},
			Peers: []bgp.PeerStatus{{Address: r1, ASN: 65000, State: state(keep1), Since: started, KeepsStalePaths: keep1},
				{Address: r2, ASN: 65000, State: state(keep2), Since: started, KeepsStalePaths: keep2}}}
	}
	restarted := func(open bool) *bgp.GracefulRestartStatus {
		g := &bgp.GracefulRestartStatus{RestartTime: 30 * time.Second, Restarted: true, StaleUntil: started.Add(30 * time.Second)}
		if open {
			g.OpenedAt = started.Add(3 * time.Second)
		} else {
			g.OpenBy = started.Add(25 * time.Second)
		}
		return g
	}
	const table = "  ROUTER     AS     SESSION      SINCE     BFD  FLAPS  LAST FLAP\n"
	row := func(addr, state string) string {
		return fmt.Sprintf("  %-9s  65000  %-11s  11:45:00  off  0      -\n", addr, state)
	}
	const tail = "  announced: 192.0.2.10/32\n\n"
	for _, tc := range []struct {
		name string
		st   *bgp.Status
		want string
	}{
		{"off", status(nil, false, false),
			"bgp: AS 65001, router id 10.0.0.2, in service, 1 routes announced, 0 TCP-MD5 failures, graceful restart off\n" +
				table + row("10.0.0.10", "established") + row("10.0.0.11", "established") + tail},
		{"on, a plain start", status(&bgp.GracefulRestartStatus{RestartTime: 30 * time.Second}, false, false),
			"bgp: AS 65001, router id 10.0.0.2, in service, 1 routes announced, 0 TCP-MD5 failures, graceful restart on (restart time 30s)\n" +
				table + row("10.0.0.10", "established") + row("10.0.0.11", "established") + tail},
		{"restarted, sessions held back", status(restarted(false), true, true),
			"bgp: AS 65001, router id 10.0.0.2, in service, 1 routes announced, 0 TCP-MD5 failures, graceful restart on (restart time 30s)\n" +
				"  RESTARTED GRACEFULLY: the sessions open with the first routes, at 2026-12-05 11:45:25 at the latest\n" +
				"  routers keeping this director's paths from before the restart (stale) until their session is back with the routes, " +
				"at most until 2026-12-05 11:45:30: 10.0.0.10 10.0.0.11\n" +
				"  ROUTER     AS     SESSION  SINCE     BFD  FLAPS  LAST FLAP\n" +
				"  10.0.0.10  65000  idle     11:45:00  off  0      -\n" +
				"  10.0.0.11  65000  idle     11:45:00  off  0      -\n" + tail},
		{"restarted, one router back", status(restarted(true), false, true),
			"bgp: AS 65001, router id 10.0.0.2, in service, 1 routes announced, 0 TCP-MD5 failures, graceful restart on (restart time 30s)\n" +
				"  routers keeping this director's paths from before the restart (stale) until their session is back with the routes, " +
				"at most until 2026-12-05 11:45:30: 10.0.0.11\n" +
				table + row("10.0.0.10", "established") + row("10.0.0.11", "idle") + tail},
		{"restarted, every router back", status(restarted(true), false, false),
			"bgp: AS 65001, router id 10.0.0.2, in service, 1 routes announced, 0 TCP-MD5 failures, graceful restart on (restart time 30s)\n" +
				table + row("10.0.0.10", "established") + row("10.0.0.11", "established") + tail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeBGPStatus(&b, tc.st, false, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// TestWriteBGPStatusBFDDowns: the BFD column says how often a session went
// down, short losses that cost no BGP session included.
func TestWriteBGPStatusBFDDowns(t *testing.T) {
	since := time.Date(2026, 12, 5, 11, 45, 0, 0, time.UTC)
	st := &bgp.Status{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.2"), Peers: []bgp.PeerStatus{
		{Address: netip.MustParseAddr("10.0.0.10"), ASN: 65000, State: bgp.StateEstablished, Since: since, BFD: "up", BFDDowns: 3},
		{Address: netip.MustParseAddr("10.0.0.11"), ASN: 65000, State: bgp.StateEstablished, Since: since, BFD: "up"}}}
	var b strings.Builder
	if err := writeBGPStatus(&b, st, false, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  10.0.0.10  65000  established  11:45:00  up (3 down)  0      -\n",
		"  10.0.0.11  65000  established  11:45:00  up           0      -\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no line %q in:\n%s", want, b.String())
		}
	}
}
