//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// The cluster port under a flood (docs/security.md, "The cluster port"):
// two directors, active-standby at the default timers (250 ms failure
// timeout); from the client's side a stranger sends junk UDP to the
// standby's cluster port at floodRate packets a second and holds
// floodConns TCP connections to it, for floodFor (E2E_FLOOD_FOR
// overrides). The stranger's address (10.9.0.1, routed through the
// client) is neither a peer nor on the directors' subnet.
const (
	floodRate  = 20000
	floodConns = 500
	floodFor   = 30 * time.Second
	floodSrc   = "10.9.0.1"
)

// TestClusterPortFlood: with lvsd's default filter nothing moves: the VIP
// stays on its owner, no director is declared failed, the standby's
// memory stays within floodRSSBound of where it was, and it logs no more
// than a handful of warnings.
func TestClusterPortFlood(t *testing.T) {
	r := runFlood(t, "")
	if r.failed > 0 || r.moves > 0 {
		t.Errorf("%d directors declared failed, the VIP moved %d times under the flood (timeline above)", r.failed, r.moves)
	}
	if r.rssGrowth > floodRSSBound {
		t.Errorf("the standby's RSS grew by %d KiB under the flood, want at most %d KiB", r.rssGrowth, floodRSSBound)
	}
	if r.warnings > maxFloodWarnings {
		t.Errorf("the standby logged %d warnings and errors under the flood, want at most %d", r.warnings, maxFloodWarnings)
	}
	if r.refusedPackets > 0 || r.established > 0 {
		t.Errorf("the stranger got past the filter: %d packets reached memberlist, %d connections established", r.refusedPackets, r.established)
	}
}

// TestClusterPortFloodUnfiltered is the same flood with the filter opened
// (allow_from: [0.0.0.0/0]): the junk reaches memberlist and the streams
// reach the transport, which must still bound what they cost (memory,
// log); whether heartbeats suffer is reported, for comparison.
func TestClusterPortFloodUnfiltered(t *testing.T) {
	r := runFlood(t, "  allow_from: [0.0.0.0/0]\n")
	t.Logf("unfiltered: %d directors declared failed, %d VIP moves", r.failed, r.moves)
	if r.refusedPackets == 0 || r.established == 0 {
		t.Errorf("the junk did not reach the standby (%d packets refused by memberlist, %d connections): the comparison proves nothing",
			r.refusedPackets, r.established)
	}
	if r.rssGrowth > floodRSSBound {
		t.Errorf("the standby's RSS grew by %d KiB under the flood, want at most %d KiB", r.rssGrowth, floodRSSBound)
	}
	if r.warnings > maxFloodWarnings {
		t.Errorf("the standby logged %d warnings and errors under the flood, want at most %d", r.warnings, maxFloodWarnings)
	}
	if r.refusedStreams == 0 {
		t.Errorf("no stream refused while %d were held open", floodConns)
	}
}

const (
	floodRSSBound    = 32 << 10 // KiB
	maxFloodWarnings = 10
)

type floodResult struct {
	failed, moves                  int
	rssGrowth                      int           // KiB, the largest seen minus the start
	cpu                            time.Duration // the standby's lvsd's CPU time during the flood
	stalls                         int
	warnings                       int
	refusedPackets, refusedStreams uint64
	established                    int64
}

func runFlood(t *testing.T, clusterYAML string) floodResult {
	d := floodFor
	if s := os.Getenv("E2E_FLOOD_FOR"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	client, src := tp.Client(), netip.MustParseAddr(floodSrc)
	if err := client.AddAddr(netip.PrefixFrom(src, 32), "lo"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range tp.Directors() {
		if err := dir.AddRoute(netip.MustParsePrefix("10.9.0.0/24"), client.V4); err != nil {
			t.Fatal(err)
		}
	}
	ds := startCluster(t, tp, clusterKey(t), clusterYAML, vip)
	settle(t, tp, vip, 2*time.Second, 30*time.Second)
	owner, standby := tp.Director(1), tp.Director(2)
	waitHolders(t, tp, vip, time.Second, onlyOn(owner.ID))
	before := statusPart[cluster.View](t, standby, "cluster")
	marks := []int{ds[0].logSize(), ds[1].logSize()}
	rss0, cpu0 := vmRSS(t, ds[1]), cpuTime(t, ds[1])
	tl := startTimeline(t, tp, []netip.Addr{vip})

	target := netip.AddrPortFrom(standby.V4, cluster.DefaultPort)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var sent, established, dials atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { sent.Add(floodUDP(t, ctx, client, netip.AddrPortFrom(src, 0), target, floodRate/2)) })
	}
	for range floodConns {
		wg.Go(func() { holdConn(ctx, client, src, target, &established, &dials) })
	}
	start := time.Now()
	maxRSS := rss0
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		maxRSS = max(maxRSS, vmRSS(t, ds[1]))
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(time.Second) // what the flood left queued is read
	tl.close()
	after := statusPart[cluster.View](t, standby, "cluster")
	r := floodResult{rssGrowth: maxRSS - rss0, refusedPackets: after.RefusedPackets - before.RefusedPackets,
		refusedStreams: after.RefusedStreams - before.RefusedStreams, established: established.Load(),
		cpu: cpuTime(t, ds[1]) - cpu0, stalls: after.Stalls - before.Stalls}
	r.moves = strings.Count(tl.String(), " on [") - 1
	for i, l := range ds {
		text := l.logSince(marks[i])
		r.failed += countLines(text, "director failed")
		if i == 1 {
			r.warnings = countLines(text, "level=WARN") + countLines(text, "level=ERROR")
			t.Logf("%s's warnings and errors:\n%s", standby.ID, grepLines(text, "level=WARN", "level=ERROR"))
		}
	}
	t.Logf("timeline:\n%s", tl)
	t.Logf("flood of %s for %s: %d junk datagrams (%.0f/s, target %d/s), %d TCP connects tried, %d established",
		target, took.Round(time.Millisecond), sent.Load(), float64(sent.Load())/took.Seconds(), floodRate, dials.Load(), established.Load())
	t.Logf("%s: RSS %d KiB before, at most %d KiB during (+%d KiB); lvsd used %s of CPU (%.0f %%); %d packets failed authentication, %d streams refused; %d warnings and errors; %d directors declared failed, %d detection stalls",
		standby.ID, rss0, maxRSS, r.rssGrowth, r.cpu.Round(time.Millisecond), 100*r.cpu.Seconds()/took.Seconds(), r.refusedPackets, r.refusedStreams,
		r.warnings, r.failed, r.stalls)
	return r
}

// floodUDP sends junk datagrams from from to to at rate a second, paced
// in 10 ms slots, until ctx ends; it returns how many it sent.
func floodUDP(t *testing.T, ctx context.Context, h *topo.Host, from, to netip.AddrPort, rate int) int64 {
	var conn *net.UDPConn
	if err := h.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(from))
		return err
	}); err != nil {
		t.Errorf("flooding from %s: %v", from, err)
		return 0
	}
	defer conn.Close()
	junk := make([]byte, 64)
	_, _ = rand.Read(junk)
	const slot = 10 * time.Millisecond
	per := rate * int(slot) / int(time.Second)
	var n int64
	next := time.Now()
	for ctx.Err() == nil {
		for range per {
			junk[0]++
			if _, err := conn.WriteToUDPAddrPort(junk, to); err == nil {
				n++
			}
		}
		next = next.Add(slot)
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
	}
	return n
}

// holdConn keeps one TCP connection from src to to open and idle until
// ctx ends, connecting again whenever it is closed.
func holdConn(ctx context.Context, h *topo.Host, src netip.Addr, to netip.AddrPort, established, dials *atomic.Int64) {
	for ctx.Err() == nil {
		dials.Add(1)
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := h.Dial(dctx, "tcp", src, to)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		established.Add(1)
		go func() { <-ctx.Done(); c.Close() }()
		_, _ = c.Read(make([]byte, 1)) // until the director closes it
		c.Close()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cpuTime is the CPU time l's process has used (user and system).
func cpuTime(t *testing.T, l *lvsd) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", l.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name (in parentheses): utime and
	// stime are the 12th and 13th, in clock ticks (USER_HZ, 100).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", l.cmd.Process.Pid, b)
	}
	user, err1 := strconv.Atoi(f[11])
	sys, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", l.cmd.Process.Pid, b)
	}
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// vmRSS is l's resident set size in KiB.
func vmRSS(t *testing.T, l *lvsd) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", l.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", l.cmd.Process.Pid)
	return 0
}

// TestNftFlushRestored: `nft flush ruleset` on a running director of a
// cluster with connection sync; lvsd's tables, with the sync guard and the
// cluster port filter, are back within a second, and the sync daemons
// run again.
func TestNftFlushRestored(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	startCluster(t, tp, clusterKey(t), "", vip)
	settle(t, tp, vip, 2*time.Second, 30*time.Second)
	d := tp.Director(2)
	ctx := context.Background()
	list := func() string {
		out, _ := d.Run(ctx, "nft", "list", "table", "ip", "lvsd")
		return out
	}
	guarded := func(s string) bool {
		return strings.Contains(s, "only root feeds the IPVS sync daemons") && strings.Contains(s, "only the directors reach the cluster port")
	}
	if s := list(); !guarded(s) {
		t.Fatalf("before the flush, lvsd's table lacks the guard or the filter:\n%s", s)
	}
	var worst time.Duration
	for i := range 3 {
		if out, err := d.Run(ctx, "nft", "flush", "ruleset"); err != nil {
			t.Fatalf("nft flush ruleset: %v: %s", err, out)
		}
		flushed := time.Now()
		for !guarded(list()) {
			if time.Since(flushed) > 5*time.Second {
				t.Fatalf("flush %d: lvsd's table not back within 5 s:\n%s", i+1, list())
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(flushed)
		worst = max(worst, took)
		t.Logf("flush %d: guard and filter back after %s (each nft run costs ~0.1 s under TCG)", i+1, took.Round(time.Millisecond))
		time.Sleep(time.Second)
	}
	if worst > 1500*time.Millisecond {
		t.Errorf("the tables took up to %s to come back, want about a second", worst)
	}
	out, err := d.Run(ctx, "ipvsadm", "-L", "--daemon")
	if err != nil || !strings.Contains(out, "master") || !strings.Contains(out, "backup") {
		t.Errorf("sync daemons after the flushes: %v\n%s", err, out)
	}
}
