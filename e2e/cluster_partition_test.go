//go:build e2e

package e2e

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/topo"
)

// detectionWindow bounds how long a VIP may be on two directors, and how
// long a cut-off director may keep its VIPs: the failure timeout (250 ms)
// plus a reconcile and the slack of a TCG VM.
const detectionWindow = time.Second

const partitionTable = "lvsd_e2e_partition"

// partition drops all IP traffic between h and the other directors, in
// h's namespace (the client still reaches h). It is one nftables
// transaction made in-process, so the cut has a precise time (an nft exec
// takes up to a second under TCG).
func partition(t *testing.T, tp *topo.Topology, h *topo.Host) {
	t.Helper()
	err := h.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: partitionTable})
		for _, hook := range []*nftables.ChainHook{nftables.ChainHookInput, nftables.ChainHookOutput} {
			name := "cut-in"
			if hook == nftables.ChainHookOutput {
				name = "cut-out"
			}
			ch := c.AddChain(&nftables.Chain{Name: name, Table: tbl, Type: nftables.ChainTypeFilter, Hooknum: hook,
				Priority: nftables.ChainPriorityRaw})
			for _, d := range tp.Directors() {
				if d == h {
					continue
				}
				for _, ip := range []netip.Addr{d.V4, d.V6} {
					c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: dropAddr(ip, hook == nftables.ChainHookInput)})
				}
			}
		}
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("partitioning %s: %v", h.ID, err)
	}
}

// dropAddr is "ip saddr X drop" (or daddr; ip6 for IPv6).
func dropAddr(ip netip.Addr, source bool) []expr.Any {
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if source {
		off = 12
	}
	if ip.Is6() {
		proto, off = unix.NFPROTO_IPV6, 24
		if source {
			off = 8
		}
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(ip.BitLen() / 8)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.AsSlice()},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

func heal(t *testing.T, h *topo.Host) {
	t.Helper()
	err := h.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: partitionTable})
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("healing %s: %v", h.ID, err)
	}
}

// TestPartitionQuorum: director3 is cut off from the other two by nft
// drops. With a quorum of 2 of 3 it releases its VIPs within the detection
// window while the majority takes them; no VIP is on two directors for
// longer than that. After the heal the membership merges again within
// 30 s and director3 gets its VIPs back.
func TestPartitionQuorum(t *testing.T) {
	vips := activeActiveVIPs()
	tp := clusterSetup(t, vips...)
	ds := startCluster(t, tp, clusterKey(t), "  mode: active-active\n  quorum: 2\n", vips...)
	before := settleAll(t, tp, vips)
	c := tp.Director(3)
	var mine []netip.Addr
	for _, v := range vips {
		if before[v] == c.ID {
			mine = append(mine, v)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("director3 owns no VIP: %v", before)
	}
	tl := startTimeline(t, tp, vips)
	tl.mark("partition")
	cut := time.Now()
	partition(t, tp, c)
	waitReleased(t, c, mine, 5*time.Second)
	for _, v := range mine {
		waitHolders(t, tp, v, 5*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != c.ID })
	}
	time.Sleep(100 * time.Millisecond) // the timeline's next round
	// From the timeline (polled every 20 ms): when each VIP left
	// director3, and when the majority had it.
	var released, moved time.Duration
	for _, v := range mine {
		r := tl.firstAfter(v, cut, func(h []string) bool { return !slices.Contains(h, c.ID) })
		m := tl.firstAfter(v, cut, func(h []string) bool { return len(h) == 1 && h[0] != c.ID })
		if r.IsZero() || m.IsZero() {
			t.Fatalf("the timeline did not see %s move:\n%s", v, tl)
		}
		released, moved = max(released, r.Sub(cut)), max(moved, m.Sub(cut))
	}
	t.Logf("partition: director3 released %v within %v; the majority held them all within %v",
		mine, released.Round(time.Millisecond), moved.Round(time.Millisecond))
	if released > detectionWindow {
		t.Errorf("director3 released its VIPs %v after the partition, want within %v", released, detectionWindow)
	}
	if moved > detectionWindow {
		t.Errorf("the majority took director3's VIPs %v after the partition, want within %v", moved, detectionWindow)
	}
	if strings.Contains(strings.Join(holdersOfAll(t, tp, mine), ","), c.ID) {
		t.Errorf("director3 still holds VIPs")
	}
	if k := countLines(ds[2].log(), "quorum lost"); k == 0 {
		t.Errorf("director3 did not log that it lost the quorum")
	}

	// Long enough for memberlist to count the other side failed too.
	time.Sleep(8 * time.Second)
	marks := []int{ds[0].logSize(), ds[1].logSize(), ds[2].logSize()}
	tl.mark("heal")
	healed := time.Now()
	heal(t, c)
	// Merged: every director's memberlist counts the two others alive
	// again (their last event in its log is a join).
	for time.Since(healed) < 30*time.Second {
		all := true
		for _, l := range ds {
			m := gossipMembers(l.log())
			for _, d := range tp.Directors() {
				all = all && (d == l.host || m[d.ID])
			}
		}
		if all {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	merged := time.Since(healed)
	for i, l := range ds {
		t.Logf("%s after the heal:\n%s", l.host.ID, grepLines(l.logSince(marks[i]), "member joined", "director up"))
	}
	if merged >= 30*time.Second {
		t.Errorf("memberlist did not merge within 30 s of the heal")
	} else {
		t.Logf("membership merged %v after the heal", merged.Round(time.Millisecond))
	}
	for _, v := range mine {
		waitHolders(t, tp, v, 10*time.Second, onlyOn(c.ID))
	}
	time.Sleep(500 * time.Millisecond)
	tl.close()
	t.Logf("timeline:\n%s", tl)
	for _, v := range vips {
		if tl.overlap[v] > detectionWindow {
			t.Errorf("%s was on two directors for %v, longer than the detection window %v", v, tl.overlap[v], detectionWindow)
		}
		// The cut-off director never takes the others' VIPs, neither
		// during the partition nor right after the heal.
		if !slices.Contains(mine, v) && tl.everOn(v, c.ID, cut, time.Now()) {
			t.Errorf("director3 took %s, which it did not own (timeline above)", v)
		}
	}
	for _, v := range mine {
		askVIP(t, tp.Client(), v)
		checkNeighbour(t, tp.Client(), c, v, 2*time.Second)
	}
}

// TestWrongKey: a director with another key cannot join, says why in its
// log, and never holds the VIP although its priority is the highest.
func TestWrongKey(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	good, bad := clusterKey(t), clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors() {
		key, prio := good, []string{"200", "100", "250"}[i]
		if i == 2 {
			key = bad
		}
		l := newClusterDirector(t, tp, d, key, "  priority: "+prio+"\n", vip)
		l.start()
		ds = append(ds, l)
	}
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	time.Sleep(3 * time.Second)
	if h := holders(t, tp, vip); len(h) != 1 || h[0] != "director" {
		t.Errorf("%s is on %v, want director alone", vip, h)
	}
	line := ds[2].waitLog(0, 10*time.Second, "cannot join the cluster", "another key")
	t.Logf("director3 says: %s", line)
	for _, l := range ds[:2] {
		if strings.Contains(l.log(), "member=director3 ") {
			t.Errorf("%s let director3 in", l.host.ID)
		}
		l.waitLog(0, 5*time.Second, "dropping cluster messages that fail authentication")
	}
	if strings.Contains(ds[2].log(), "taking VIP") {
		t.Errorf("director3 took the VIP")
	}
}

// waitReleased waits until none of vips is on h and returns when.
func waitReleased(t *testing.T, h *topo.Host, vips []netip.Addr, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		have := addrsOf(t, h)
		left := false
		for _, v := range vips {
			left = left || slices.Contains(have, netip.PrefixFrom(v, v.BitLen()))
		}
		if !left {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds some of %v after %v", h.ID, vips, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gossipMembers replays memberlist's join and leave events in an lvsd
// log: member → alive after the last one.
func gossipMembers(log string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		_, rest, ok := strings.Cut(line, " member=")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		switch {
		case strings.Contains(line, `msg="member joined"`):
			out[name] = true
		case strings.Contains(line, `msg="member left or failed"`):
			out[name] = false
		}
	}
	return out
}

// holdersOfAll lists the holders of every VIP of vips.
func holdersOfAll(t *testing.T, tp *topo.Topology, vips []netip.Addr) []string {
	t.Helper()
	var out []string
	for _, v := range vips {
		out = append(out, holders(t, tp, v)...)
	}
	return out
}

// grepLines returns the lines of text containing any of subs.
func grepLines(text string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
