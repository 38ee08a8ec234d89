//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// The flood of TestConntrackFlood.
const (
	floodUDPFlows = 10_000
	floodACKs     = 1_000
	// ctFloodFor spreads the flood over 55 s, 200 packets a second: the
	// VM's router, three directors, their connection sync, two real
	// servers and the client share two virtual CPUs, and at 400–600 a
	// second the VM was saturated (BGP keepalives starved past the hold
	// time and paths went away; a third of the probes failed). 55 s is
	// past the 30 s the others' records keep their entries, so the
	// budget is full for the second half of the flood.
	ctFloodFor = 55 * time.Second
	// At 200 a second the others' records (two thirds of the flows, kept
	// 30 s each) are four times a budget of floodPeerShare of the table,
	// and the directors' own flows (a third, plus the probes and the
	// spoofed ACKs' entries, which stay longer) take about 3,000 entries
	// beside it: the table is sized for those, as docs/ecmp.md says to.
	// Without the budget the others' entries, kept for the records' 300 s,
	// would outgrow it before the flood ends.
	floodConntrackMax = 8192
	floodPeerShare    = 10
	floodUDPPort      = 5353
	floodProbeEvery   = 50 * time.Millisecond // 20 new connections a second, to each service
)

// TestConntrackFlood: under ECMP every director makes conntrack entries
// for the FULLNAT connections the others sync to it. A client floods a
// FULLNAT UDP and a FULLNAT TCP service through the router with
// single-packet UDP flows and spoofed TCP ACKs (which sloppy_tcp makes
// ESTABLISHED IPVS connections) from 11,000 source addresses over
// ctFloodFor, with nf_conntrack_max at 8,192 and peer_conntrack_share at 10 %. Each director's table keeps
// its own flows plus at most peer_conntrack_share of the table for
// the others', so it never fills (the kernel logs no "table full" and
// drops no entry early): new connections to both services keep succeeding through every
// director (95 % at least), BGP and the cluster stay up, and the directors count the
// records they refused. Without the budget the others' entries, assured
// and kept for the records' 300 s, fill the table within the flood.
func TestConntrackFlood(t *testing.T) {
	// BFD at 1 s × 10 and a BGP hold time of 45 s: the flood is not about
	// detecting failures, and a VM stall of seconds (seen when the host is
	// busy) would take paths away.
	l := newECMPLab(t, ecmpOptions{directors: 3, sources: 200, sync: true, fullnat: true, bfdMultiplier: 10, holdTime: 45 * time.Second,
		peerShare: floodPeerShare})
	tp := l.tp
	serveEcho(t, echo.Config{UDP: []uint16{floodUDPPort}}, tp.RealServers()...)
	perDirector := ""
	for i, d := range tp.Directors() {
		perDirector += fmt.Sprintf("    %s: [%s]\n", d.ID, snatOf(i+1))
	}
	for _, d := range l.ds {
		writeFile(t, filepath.Join(d.dir, "services.d", "udp.yaml"), fmt.Sprintf(
			"service: udp\nvip: %s\nprotocol: udp\nports: [%d]\nforwarding: fullnat\nfullnat:\n  per_director:\n%s"+
				"backends:\n  - {address: %s}\n  - {address: %s}\n", ecmpVIP, floodUDPPort, perDirector, tp.RS(1).V4, tp.RS(2).V4))
	}
	l.start("director", "director2", "director3")
	setConntrackMax(t, floodConntrackMax)
	// lvsd reads the table size every 5 s.
	time.Sleep(6 * time.Second)

	tableFullBefore := kernelLogLines(t, "nf_conntrack: table full")
	probes := startFloodProbes(t, tp.Client())
	watch := startFloodWatch(t, l)
	start := time.Now()
	sent, err := floodVIP(t.Context(), tp.Client(), ctFloodFor)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("flood: %v (%d packets sent)", err, sent)
	}
	t.Logf("flood: %d UDP flows and %d TCP ACKs in %v: %.0f packets/s", floodUDPFlows, floodACKs, took.Round(time.Millisecond),
		float64(sent)/took.Seconds())
	time.Sleep(2 * time.Second) // the last records reach the peers
	probes.close()
	watch.close()

	// The kernel says "table full, dropping packet" when it drops one for a
	// full table (any namespace); its drop counter also counts other
	// failures (two packets of one new UDP flow racing to confirm it), so
	// that is reported, not asserted.
	if n := kernelLogLines(t, "nf_conntrack: table full") - tableFullBefore; n > 0 {
		t.Errorf("the kernel logged %d times that a conntrack table was full", n)
	}
	for _, d := range tp.Directors() {
		peak := watch.peak[d.ID]
		drop, early := conntrackDrops(t, d)
		t.Logf("%s: nf_conntrack_count peaked at %d of %d (every 5 s: %s); packets dropped by conntrack %d, entries dropped early %d",
			d.ID, peak, floodConntrackMax, watch.timeline(d.ID), drop, early)
		if c, ok := watch.census[d.ID]; ok {
			t.Logf("%s: entries by kind %s", d.ID, c)
		}
		if peak >= floodConntrackMax || early > 0 {
			t.Errorf("%s: nf_conntrack_count reached %d of %d, %d entries dropped early to make room", d.ID, peak, floodConntrackMax, early)
		}
	}
	if watch.fewestPaths < 3 {
		t.Errorf("the router's route to %s fell to %d next hops during the flood, want 3 throughout", ecmpVIP, watch.fewestPaths)
	}
	for _, proto := range []string{echo.TCP, echo.UDP} {
		n, ok, by, failed := probes.result(proto)
		t.Logf("%s probes: %d/%d succeeded, by director source address %v; %s", proto, ok, n, by, failed)
		// 99.9 % succeeded in the runs of docs/ecmp.md; a VM starved by
		// a busy host loses a few more (a probe's first SYN or datagram
		// is retried, a second loss fails it), hence the margin.
		if ok*100 < n*95 {
			t.Errorf("%s probes: %d of %d succeeded, want 95 %%", proto, ok, n)
		}
		if n < int(ctFloodFor/floodProbeEvery)/2 {
			t.Errorf("%s probes: only %d sent", proto, n)
		}
		for i := range tp.Directors() {
			if by[snatOf(i+1)] == 0 {
				t.Errorf("%s probes: none went through director %d (source address %s)", proto, i+1, snatOf(i+1))
			}
		}
	}
	for _, d := range tp.Directors() {
		st := floodStatus(t, d)
		if st.Cluster == nil || st.Cluster.Live != 3 {
			t.Errorf("%s: cluster %+v, want 3 live directors", d.ID, st.Cluster)
		}
		pf := st.PeerFlows
		if pf == nil {
			t.Errorf("%s: no peer_flows in the status", d.ID)
			continue
		}
		t.Logf("%s: peer entries created %d, refreshed %d, failed %d, dropped %d, refused by the budget %d; %d counted of %d; table %d of %d",
			d.ID, pf.Created, pf.Refreshed, pf.Failed, pf.Dropped, pf.RefusedBudget, pf.Live, pf.Limit, pf.ConntrackEntries, pf.ConntrackMax)
		if want := int64(floodConntrackMax * floodPeerShare / 100); pf.Limit != want {
			t.Errorf("%s: peer entry cap %d, want %d (%d %% of %d)", d.ID, pf.Limit, want, floodPeerShare, floodConntrackMax)
		}
		if pf.RefusedBudget == 0 || pf.Live > pf.Limit {
			t.Errorf("%s: %d refused, %d counted of %d: the budget did not cut the flood", d.ID, pf.RefusedBudget, pf.Live, pf.Limit)
		}
	}
}

// setConntrackMax sets nf_conntrack_max, one value for every namespace
// (only the initial one may write it), for the test.
func setConntrackMax(t *testing.T, n int) {
	t.Helper()
	const path = "/proc/sys/net/netfilter/nf_conntrack_max"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
}

// kernelLogLines counts the lines of the kernel's log that contain text.
func kernelLogLines(t *testing.T, text string) int {
	t.Helper()
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		t.Fatalf("dmesg: %v", err)
	}
	return strings.Count(string(out), text)
}

// conntrackDrops sums the kernel's per-CPU conntrack statistics in h's
// namespace: packets dropped because the table was full and nothing could
// be dropped early, and entries dropped early to make room.
func conntrackDrops(t *testing.T, h *topo.Host) (drop, earlyDrop uint64) {
	t.Helper()
	var b []byte
	if err := h.Do(func() error {
		var err error
		b, err = os.ReadFile("/proc/thread-self/net/stat/nf_conntrack") // this thread's namespace
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	header := strings.Fields(lines[0])
	for _, line := range lines[1:] {
		for i, f := range strings.Fields(line) {
			n, err := strconv.ParseUint(f, 16, 64)
			if err != nil || i >= len(header) {
				t.Fatalf("%s: /proc/net/stat/nf_conntrack: %q", h.ID, line)
			}
			switch header[i] {
			case "drop":
				drop += n
			case "early_drop":
				earlyDrop += n
			}
		}
	}
	return drop, earlyDrop
}

func floodStatus(t *testing.T, h *topo.Host) views.Status {
	t.Helper()
	out, code := runLVSD(t, h, "status", "--json", "--socket=/run/lvsd-e2e/"+h.Name+".sock")
	if code != 0 {
		t.Fatalf("%s: lvsd status --json: exit %d: %s", h.ID, code, out)
	}
	var st views.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%s: lvsd status --json: %v", h.ID, err)
	}
	return st
}

// floodVIP sends floodUDPFlows single-datagram UDP flows to the UDP
// service and floodACKs bare TCP ACKs to the TCP one, each from its own
// source address and port in the client's 10.1.0.0/16, paced evenly over
// d, through a raw socket in client's namespace. It returns the packets
// sent.
func floodVIP(ctx context.Context, client *topo.Host, d time.Duration) (int, error) {
	var fd int
	if err := client.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		return err
	}); err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	total := floodUDPFlows + floodACKs
	every := total / floodACKs // one ACK in every, the rest UDP
	dst := &unix.SockaddrInet4{Addr: ecmpVIP.As4()}
	vip := ecmpVIP.As4()
	buf := make([]byte, 64)
	start := time.Now()
	sent := 0
	for sent < total {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		// Behind schedule (the VM stalled), catch up by 20 ms worth at
		// most per round: a burst would starve the BFD sessions.
		due := min(total, int(float64(total)*float64(time.Since(start))/float64(d))+1, sent+total*int(20*time.Millisecond)/int(d)+1)
		for ; sent < due; sent++ {
			// A source of its own for every packet: 10.1.0.1 on.
			k := 1 + sent%65000
			src := [4]byte{10, 1, byte(k >> 8), byte(k)}
			sport := uint16(20000 + sent/65000)
			var pkt []byte
			if sent%every == every-1 {
				pkt = tcpACK(buf, src, vip, sport, 80)
			} else {
				pkt = udpDatagram(buf, src, vip, sport, floodUDPPort, []byte("flood\n"))
			}
			if err := unix.Sendto(fd, pkt, 0, dst); err != nil && err != unix.ENOBUFS {
				return sent, err
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return sent, nil
}

// ipv4Header writes an IPv4 header of protocol proto and total length n
// into b; the kernel fills in the ID and the checksum (IPPROTO_RAW).
func ipv4Header(b []byte, src, dst [4]byte, proto byte, n int) {
	clear(b[:20])
	b[0], b[8], b[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
}

func udpDatagram(b []byte, src, dst [4]byte, sport, dport uint16, payload []byte) []byte {
	n := 20 + 8 + len(payload)
	ipv4Header(b, src, dst, unix.IPPROTO_UDP, n)
	u := b[20:n]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(u[6:], 0) // no checksum (IPv4)
	copy(u[8:], payload)
	return b[:n]
}

// tcpACK is a bare ACK of a connection nobody opened; IPVS checks the TCP
// checksum of what it translates, so it is right.
func tcpACK(b []byte, src, dst [4]byte, sport, dport uint16) []byte {
	n := 20 + 20
	ipv4Header(b, src, dst, unix.IPPROTO_TCP, n)
	h := b[20:n]
	clear(h)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint32(h[4:], rand.Uint32())
	binary.BigEndian.PutUint32(h[8:], rand.Uint32())
	h[12], h[13] = 5<<4, 0x10 // data offset 5 words; ACK
	binary.BigEndian.PutUint16(h[14:], 512)
	// Checksum over the pseudo header and the segment.
	var sum uint32
	for _, w := range [][]byte{src[:], dst[:], {0, unix.IPPROTO_TCP, 0, 20}, h} {
		for i := 0; i+1 < len(w); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(w[i:]))
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[16:], ^uint16(sum))
	return b[:n]
}

// floodProbes opens a new connection to each service every
// floodProbeEvery, through the router, and records which director's
// source address the real server saw.
type floodProbes struct {
	probeLoop
	mu   sync.Mutex
	runs map[string][]floodProbe // by protocol
}

type floodProbe struct {
	start time.Time
	err   error
	via   netip.Addr // the director's source address
}

func startFloodProbes(t *testing.T, client *topo.Host) *floodProbes {
	p := &floodProbes{probeLoop: newProbeLoop(), runs: map[string][]floodProbe{}}
	for _, target := range []struct {
		proto string
		port  uint16
	}{{echo.TCP, 80}, {echo.UDP, floodUDPPort}} {
		dst := netip.AddrPortFrom(ecmpVIP, target.port)
		p.every(floodProbeEvery, func() {
			// A lost first SYN or datagram is retried within the timeout:
			// a probe fails when the director drops the flow for good.
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := echo.Ask(ctx, client, netip.Addr{}, dst, target.proto)
			p.mu.Lock()
			p.runs[target.proto] = append(p.runs[target.proto], floodProbe{start: start, err: err, via: r.Peer.Addr()})
			p.mu.Unlock()
		})
	}
	t.Cleanup(p.close)
	return p
}

// result returns how many probes of proto ran, how many succeeded, how
// many of those went through each director's source address, and the
// failures: per 10 s from the first probe, and the first few errors.
func (p *floodProbes) result(proto string) (n, ok int, by map[netip.Addr]int, failed string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	by = map[netip.Addr]int{}
	var per10s []int
	var errs []string
	for _, r := range p.runs[proto] {
		n++
		if r.err == nil {
			ok++
			by[r.via]++
			continue
		}
		i := int(r.start.Sub(p.runs[proto][0].start) / (10 * time.Second))
		for len(per10s) <= i {
			per10s = append(per10s, 0)
		}
		per10s[i]++
		if len(errs) < 3 {
			errs = append(errs, r.err.Error())
		}
	}
	return n, ok, by, fmt.Sprintf("failed per 10 s %v, first errors %q", per10s, errs)
}

// floodWatch samples, every second, each director's nf_conntrack_count and
// the router's next hops to the VIP.
type floodWatch struct {
	stop        chan struct{}
	done        chan struct{}
	peak        map[string]int
	samples     map[string][]int
	census      map[string]string // each director's entries when its table first passed 40 %
	fewestPaths int
}

func startFloodWatch(t *testing.T, l *ecmpLab) *floodWatch {
	w := &floodWatch{stop: make(chan struct{}), done: make(chan struct{}), peak: map[string]int{}, samples: map[string][]int{}, census: map[string]string{}, fewestPaths: 3}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for _, d := range l.tp.Directors() {
				v, err := d.ReadSysctl("net/netfilter/nf_conntrack_count")
				n, perr := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || perr != nil {
					t.Errorf("%s: nf_conntrack_count: %v %v", d.ID, err, perr)
					continue
				}
				w.samples[d.ID] = append(w.samples[d.ID], n)
				w.peak[d.ID] = max(w.peak[d.ID], n)
				if _, done := w.census[d.ID]; !done && n >= floodConntrackMax*4/10 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					w.census[d.ID] = fmt.Sprintf("at %d entries: %s", n, conntrackCensus(ctx, d, ecmpVIP.String(), 8))
					cancel()
				}
			}
			if hops, err := l.tp.Router().Nexthops(netip.PrefixFrom(ecmpVIP, 32)); err == nil {
				w.fewestPaths = min(w.fewestPaths, len(hops))
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *floodWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// timeline is every fifth sample of director id, in thousands.
func (w *floodWatch) timeline(id string) string {
	var b strings.Builder
	for i, n := range w.samples[id] {
		if i%5 == 0 {
			fmt.Fprintf(&b, "%.1fk ", float64(n)/1000)
		}
	}
	return strings.TrimSpace(b.String())
}
