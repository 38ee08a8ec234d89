package agent

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/nat"
)

// fullNATFleet writes n FULLNAT services sharing the source addresses
// 10.0.0.70 and 10.0.0.71, as the VM's data-plane cost test has them:
// bench on VIP 10.0.0.52 (two ports), the others on 10.0.0.45 (one port
// each), 1,000 to a file.
func fullNATFleet(e *testEnv, n int) {
	const common = "forwarding: fullnat\nfullnat: {source_addresses: [10.0.0.70, 10.0.0.71]}\n" +
		"backends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n"
	e.service("bench", "service: bench\nvip: 10.0.0.52\nports: [7001, 5001]\n"+common)
	for file := 0; file*1000 < n-1; file++ {
		var b strings.Builder
		for i := file * 1000; i < min(n-1, (file+1)*1000); i++ {
			fmt.Fprintf(&b, "---\nservice: x%05d\nvip: 10.0.0.45\nports: [%d]\n%s", i, 10000+i, common)
		}
		e.service(fmt.Sprintf("x%d", file), b.String())
	}
}

// takeoverBound is how long the holder may take, once the cluster gives
// it the VIPs, to restore their FULLNAT connections and add the addresses
// on the fakes. The work does not grow with the number of services: it
// takes milliseconds (20-40 ms under -race on a loaded host, 384 ms at
// worst of 20 runs), so the bound holds; 10,000 x 10,000 comparisons per
// address took 3.5 s without -race.
const takeoverBound = 2 * time.Second

// A director with 10,000 FULLNAT services sharing their source addresses
// takes its VIPs when the cluster gives them, as fast as with one: the
// cluster decides only once the agent serves the VIPs (after its first
// pass, in parts of passPart services), and the holder's pass that follows
// restores the VIPs' connections and adds the VIPs and source addresses.
// Finding the VIPs that depend on each added address once cost 10,000 ×
// 10,000 rule comparisons per address: under emulation the VIPs came 90 s
// late, on a real host seconds.
func TestFullNATTakeoverAtScale(t *testing.T) {
	v45, v52 := netip.MustParseAddr("10.0.0.45"), netip.MustParseAddr("10.0.0.52")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, v45, v52)
	node := f.Add("d1", 250)
	f.SetUp("d1", false) // the node decides later, when it hears the agent serves
	e := newEnv(t)
	fullNATFleet(e, 10000)
	k := e.kernel()
	ct := &nat.ConntrackFake{}
	k.Conntrack = ct
	h, err := NewHolder(k, node, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := e.agentWith(Options{Holder: h, Kernel: k})
	ctx, cancel := context.WithCancel(t.Context())
	stopped := h.Start(ctx)
	defer stopped()
	defer cancel()

	e.reconcile(a)
	if got := node.Served(); !slices.Equal(got, []netip.Addr{v45, v52}) {
		t.Fatalf("the agent serves %v after its first pass", got)
	}
	if got := e.addrs.Ops(); len(got) != 0 {
		t.Fatalf("addresses changed before the cluster gave a VIP: %q", got)
	}

	start := time.Now()
	f.SetUp("d1", true) // the cluster gives the VIPs: the holder's loop takes them
	want := []netip.Addr{v45, v52, netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")}
	added := func() bool {
		p := node.Present()
		return !slices.ContainsFunc(want, func(a netip.Addr) bool { return !p[a] })
	}
	// A guard against a hang, not the bound: the bound is checked below.
	for !added() && time.Since(start) < time.Minute {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	if !added() {
		t.Fatalf("no takeover within %v: addresses present %v", took, node.Present())
	}
	t.Logf("takeover of %v took %v", want, took)
	if took > takeoverBound {
		t.Errorf("the takeover took %v, want within %v", took, takeoverBound)
	}
	if ct.Calls() != 1 {
		t.Errorf("the takeover restored conntrack entries %d times, want once before the addresses", ct.Calls())
	}
	cancel()
	stopped()
	got := e.addrs.Ops()
	for _, w := range []string{"add-address eth0 10.0.0.45/32", "add-address eth0 10.0.0.52/32",
		"add-address eth0 10.0.0.70/32", "add-address eth0 10.0.0.71/32"} {
		if !slices.Contains(got, w) {
			t.Errorf("takeover %q lacks %q", got, w)
		}
	}
}
