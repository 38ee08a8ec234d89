//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// Helpers of the cluster tests (cluster_*_test.go): three directors in
// one topology, each running its own lvsd (one process per netns), DR
// services on VIPs the real servers hold on lo.

// clusterSetup builds a topology of three directors and two real servers
// serving echo on port 80 for every vip.
func clusterSetup(t *testing.T, vips ...netip.Addr) *topo.Topology {
	t.Helper()
	tp := topo.New(t, topo.WithDirectors(3), topo.WithClientSources(0))
	rs1, rs2 := tp.RS(1), tp.RS(2)
	for _, v := range vips {
		holdVIPOnLoopback(t, v, rs1, rs2)
	}
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	return tp
}

// clusterKey returns a fresh base64 cluster key.
func clusterKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// newClusterDirector writes host's agent file with the cluster block
// (indented lines under "cluster:", peers added: every director of tp), the
// key file and one DR service per VIP, in a folder of its own on the VM's
// tmpfs (9p writes are slow under TCG and the log is on the critical path
// of a failover); the log is copied to the read-write share at the end.
func newClusterDirector(t *testing.T, tp *topo.Topology, host *topo.Host, key, clusterYAML string, vips ...netip.Addr) *lvsd {
	t.Helper()
	dir := filepath.Join(t.TempDir(), host.ID)
	if err := os.MkdirAll(filepath.Join(dir, "services.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/lvsd-e2e", 0o755); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, d := range tp.Directors() {
		peers = append(peers, d.V4.String())
	}
	agentFile := fmt.Sprintf("node: %s\nrole: director\ninterface: %s\nservices_dir: services.d\nstate_dir: state\n"+
		"api: {socket: /run/lvsd-e2e/%s.sock}\nlog: {level: debug}\nstrict_modes: false\ncluster:\n  bind: %s\n  peers: [%s]\n  key_file: cluster.key\n%s",
		host.ID, host.Link, host.Name, host.V4, strings.Join(peers, ", "), clusterYAML)
	writeFile(t, filepath.Join(dir, "lvsd.yaml"), agentFile)
	if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, v := range vips {
		writeFile(t, filepath.Join(dir, "services.d", fmt.Sprintf("vip%d.yaml", i)), fmt.Sprintf(
			"service: web%d\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
			i, v, tp.RS(1).Addr(v.Is6()), tp.RS(2).Addr(v.Is6())))
	}
	l := &lvsd{t: t, host: host, dir: dir, logf: filepath.Join(dir, "lvsd.log")}
	t.Cleanup(func() {
		if keep := keepDir(t); keep != "" {
			_ = os.WriteFile(filepath.Join(keep, host.ID+".log"), []byte(l.log()), 0o644)
			_ = os.WriteFile(filepath.Join(keep, host.ID+".yaml"), []byte(agentFile), 0o644)
		}
	})
	return l
}

// holders returns the IDs of the directors that have vip on their Link.
func holders(t *testing.T, tp *topo.Topology, vip netip.Addr) []string {
	t.Helper()
	var out []string
	for _, d := range tp.Directors() {
		if slices.Contains(addrsOf(t, d), netip.PrefixFrom(vip, vip.BitLen())) {
			out = append(out, d.ID)
		}
	}
	return out
}

// waitHolders waits until exactly the directors want hold vip, and
// returns them.
func waitHolders(t *testing.T, tp *topo.Topology, vip netip.Addr, timeout time.Duration, want func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h := holders(t, tp, vip)
		if want(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v %s is on %v", timeout, vip, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exactlyOne(h []string) bool { return len(h) == 1 }

// startRankedDirectors starts lvsd on every director of tp in one cluster,
// priorities 250, 200, 150 in order, with vip as their one DR service.
func startRankedDirectors(t *testing.T, tp *topo.Topology, vip netip.Addr) []*lvsd {
	t.Helper()
	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i), vip)
		l.start()
		ds = append(ds, l)
	}
	return ds
}

func onlyOn(id string) func([]string) bool {
	return func(h []string) bool { return len(h) == 1 && h[0] == id }
}

// prober opens a new TCP connection to dst from the client every period
// (each in its own goroutine, as a stream of clients would) and records
// when each successful one got its answer.
type prober struct {
	probeLoop
	mu    sync.Mutex
	ok    []time.Time
	errs  int
	fails []time.Time // when each failed attempt was started
}

func startProber(t *testing.T, client *topo.Host, dst netip.AddrPort, period time.Duration) *prober {
	t.Helper()
	p := &prober{probeLoop: newProbeLoop()}
	p.every(period, func() {
		// Longer than two SYN retransmits: a connection started during
		// the outage may still succeed, and is then counted when it did.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		started := time.Now()
		_, err := echo.Ask(ctx, client, netip.Addr{}, dst, echo.TCP)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.errs++
			p.fails = append(p.fails, started)
			return
		}
		p.ok = append(p.ok, time.Now())
	})
	t.Cleanup(p.close)
	return p
}

// gap returns the longest time between two consecutive successes in
// [from, to] (including the last success before from and the first after):
// how long clients could not connect.
func (p *prober) gap(from, to time.Time) time.Duration {
	p.mu.Lock()
	ok := slices.Clone(p.ok)
	p.mu.Unlock()
	sort.Slice(ok, func(i, j int) bool { return ok[i].Before(ok[j]) })
	var longest time.Duration
	for i := 1; i < len(ok); i++ {
		if ok[i].Before(from) || ok[i-1].After(to) {
			continue
		}
		longest = max(longest, ok[i].Sub(ok[i-1]))
	}
	return longest
}

// waitSuccessAfter waits until a connection succeeded after at.
func (p *prober) waitSuccessAfter(t *testing.T, at time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		n := len(p.ok)
		last := time.Time{}
		if n > 0 {
			last = p.ok[n-1]
		}
		p.mu.Unlock()
		if last.After(at) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no connection succeeded within %v", timeout)
}

// checkNeighbour waits until the client's neighbour entry for vip points
// at owner's MAC: the announcement of the move reached it.
func checkNeighbour(t *testing.T, client, owner *topo.Host, vip netip.Addr, timeout time.Duration) {
	t.Helper()
	if mac, ok := waitNeighbour(t, client, owner, vip, timeout, false); !ok {
		t.Errorf("the client's neighbour entry for %s is %q, want %s's MAC %s", vip, mac, owner.ID, owner.MAC)
	}
}

// waitNeighbour waits up to timeout until h's neighbour entry for ip is
// owner's MAC (or, with noneOK, h has no entry: it never talked to ip) and
// returns the MAC it saw last and whether it got there.
func waitNeighbour(t *testing.T, h, owner *topo.Host, ip netip.Addr, timeout time.Duration, noneOK bool) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		mac := neighbour(t, h, h.Link, ip)
		if mac == owner.MAC.String() || noneOK && mac == "" {
			return mac, true
		}
		if time.Now().After(deadline) {
			return mac, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// arpAnswers broadcasts an ARP request for vip from the client and
// returns the MACs that answered within wait.
func arpAnswers(t *testing.T, client *topo.Host, vip netip.Addr, wait time.Duration) []string {
	t.Helper()
	var c *mdarp.Client
	err := client.Do(func() error {
		ifi, err := net.InterfaceByName(client.Link)
		if err != nil {
			return err
		}
		c, err = mdarp.Dial(ifi)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, err := mdarp.NewPacket(mdarp.OperationRequest, client.MAC, client.V4, ethernet.Broadcast, vip)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteTo(req, ethernet.Broadcast); err != nil {
		t.Fatal(err)
	}
	var macs []string
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for {
		p, _, err := c.Read()
		if err != nil {
			break
		}
		if p.Operation == mdarp.OperationReply && p.SenderIP == vip && !slices.Contains(macs, p.SenderHardwareAddr.String()) {
			macs = append(macs, p.SenderHardwareAddr.String())
		}
	}
	sort.Strings(macs)
	return macs
}

// byMAC names the director with that MAC.
func byMAC(tp *topo.Topology, mac string) string {
	for _, d := range tp.Directors() {
		if d.MAC.String() == mac {
			return d.ID
		}
	}
	return mac
}

// timeline polls which directors hold each VIP every 20 ms and records
// every change, to show afterwards that no VIP was on two directors for
// longer than allowed.
type timeline struct {
	mu      sync.Mutex
	t0      time.Time
	events  []string
	changes []holding
	overlap map[netip.Addr]time.Duration // longest time on two or more at once
	stop    chan struct{}
	done    chan struct{}
}

func startTimeline(t *testing.T, tp *topo.Topology, vips []netip.Addr) *timeline {
	t.Helper()
	tl := &timeline{t0: time.Now(), overlap: map[netip.Addr]time.Duration{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		last := map[netip.Addr]string{}
		since := map[netip.Addr]time.Time{}
		for {
			now := time.Now()
			held := map[netip.Addr][]string{}
			for _, d := range tp.Directors() {
				var addrs []netip.Prefix
				_ = d.Do(func() (err error) {
					addrs, err = arp.Kernel{}.List(context.Background(), d.Link)
					return err
				})
				for _, v := range vips {
					if slices.Contains(addrs, netip.PrefixFrom(v, v.BitLen())) {
						held[v] = append(held[v], d.ID)
					}
				}
			}
			tl.mu.Lock()
			for _, v := range vips {
				h := strings.Join(held[v], "+")
				if len(held[v]) > 1 {
					if since[v].IsZero() {
						since[v] = now
					}
					tl.overlap[v] = max(tl.overlap[v], now.Sub(since[v]))
				} else {
					since[v] = time.Time{}
				}
				if h != last[v] {
					tl.changes = append(tl.changes, holding{now, v, held[v]})
					tl.events = append(tl.events, fmt.Sprintf("%7.3fs %s on [%s]", now.Sub(tl.t0).Seconds(), v, h))
					last[v] = h
				}
			}
			tl.mu.Unlock()
			select {
			case <-tl.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(tl.close)
	return tl
}

func (tl *timeline) close() {
	select {
	case <-tl.stop:
	default:
		close(tl.stop)
	}
	<-tl.done
}

// holding is one observed change: from at on, vip was on holders.
type holding struct {
	at      time.Time
	vip     netip.Addr
	holders []string
}

// firstAfter returns when vip was first seen, after from, on holders
// satisfying want (zero if never).
func (tl *timeline) firstAfter(vip netip.Addr, from time.Time, want func([]string) bool) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range tl.changes {
		if c.vip == vip && c.at.After(from) && want(c.holders) {
			return c.at
		}
	}
	return time.Time{}
}

// everOn reports whether vip was seen on director id between from and to.
func (tl *timeline) everOn(vip netip.Addr, id string, from, to time.Time) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range tl.changes {
		if c.vip == vip && !c.at.Before(from) && !c.at.After(to) && slices.Contains(c.holders, id) {
			return true
		}
	}
	return false
}

func (tl *timeline) mark(what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, fmt.Sprintf("%7.3fs --- %s", time.Since(tl.t0).Seconds(), what))
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.events, "\n")
}

// busyLoops starts n processes spinning on the CPU until the test ends.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := (*topo.Host)(nil).Exec(context.Background(), "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// countLines counts log lines containing every string of want.
func countLines(log string, want ...string) int {
	k := 0
	for _, line := range strings.Split(log, "\n") {
		if containsAll(line, want) {
			k++
		}
	}
	return k
}
