//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
)

// Helpers of TestConnSurvival: a fleet of long-lived TCP connections from
// the client through a VIP, each exchanging a small checked message every
// survInterval, and what became of them after a failover.

// Connection kinds: who sends first on each exchange.
const (
	clientFirst = "client-first" // the plain echo protocol: the client sends a line, the server echoes it
	serverFirst = "server-first" // echo.TickServer: the server ticks unprompted, the client acks
)

// survConn is one connection of the fleet.
type survConn struct {
	id     int
	kind   string
	young  bool
	opened time.Time // when the handshake completed and the greeting arrived
	hello  echo.Reply
	conn   net.Conn
	local  netip.AddrPort // the client's end

	// Guarded by fleet.mu.
	oks   []time.Time // every successful exchange
	err   error       // first error, nil while it works
	errAt time.Time
}

// fleet runs connections from one client source to one VIP. The test's
// goroutine owns the deadlines: each connection gets a far one when opened
// and the final one (the end of the run) from stop, so a connection
// stalled by the failover waits as long as the run lasts, and no worker
// ever sets a deadline itself.
type fleet struct {
	client   *topo.Host
	src      netip.Addr
	vip      netip.Addr
	echoPort uint16
	tickPort uint16
	interval time.Duration

	final atomic.Bool // the deadlines are the final ones: a timeout ends the run, it is no error
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns []*survConn
}

func newFleet(t *testing.T, client *topo.Host, src, vip netip.Addr, echoPort, tickPort uint16, interval time.Duration) *fleet {
	t.Helper()
	f := &fleet{client: client, src: src, vip: vip, echoPort: echoPort, tickPort: tickPort, interval: interval}
	t.Cleanup(f.close)
	return f
}

// open opens n connections (alternately client-first and server-first),
// up to 20 dials in flight, and starts exchanging on each. It returns the
// errors of the connections that could not be opened.
func (f *fleet) open(n int, young bool) error {
	f.mu.Lock()
	base := len(f.conns)
	f.mu.Unlock()
	errs := make(chan error, n)
	sem := make(chan struct{}, 20)
	var wg sync.WaitGroup
	for i := range n {
		kind := clientFirst
		if i%2 == 1 {
			kind = serverFirst
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- f.dial(base+i, kind, young)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	if len(all) > 0 {
		return fmt.Errorf("opening %d connections to %s from %s: %d failed: %w", n, f.vip, f.src, len(all), errors.Join(all...))
	}
	return nil
}

// dial opens one connection, registers it and starts its worker.
func (f *fleet) dial(id int, kind string, young bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &survConn{id: id, kind: kind, young: young}
	var work func()
	switch kind {
	case clientFirst:
		conn, err := f.client.Dial(ctx, "tcp", f.src, netip.AddrPortFrom(f.vip, f.echoPort))
		if err != nil {
			return err
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(conn)
		line, err := r.ReadString('\n')
		if err == nil {
			c.hello, err = echo.Parse(line)
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("greeting: %w", err)
		}
		c.conn = conn
		work = func() { f.talk(c, r) }
	case serverFirst:
		tc, err := echo.ConnectTicks(ctx, f.client, f.src, netip.AddrPortFrom(f.vip, f.tickPort))
		if err != nil {
			return err
		}
		c.hello, c.conn = tc.Hello, tc
		work = func() { f.listen(c, tc) }
	}
	c.opened = time.Now()
	c.local = c.conn.LocalAddr().(*net.TCPAddr).AddrPort()
	// Far enough for any failover; stop replaces it with the final one.
	c.conn.SetDeadline(c.opened.Add(time.Minute))
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		work()
	}()
	return nil
}

// talk is a client-first worker: every interval it sends "c<id> <seq>" and
// waits for the server's echo "<name>: c<id> <seq>".
func (f *fleet) talk(c *survConn, r *bufio.Reader) {
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		msg := fmt.Sprintf("c%d %d", c.id, seq)
		if _, err := io.WriteString(c.conn, msg+"\n"); err != nil {
			f.failed(c, fmt.Errorf("write: %w", err))
			return
		}
		line, err := r.ReadString('\n')
		if err != nil {
			f.failed(c, fmt.Errorf("read: %w", err))
			return
		}
		if want := c.hello.Name + ": " + msg + "\n"; line != want {
			f.failed(c, fmt.Errorf("payload %q, want %q", line, want))
			return
		}
		f.succeeded(c)
		<-tick.C
	}
}

// listen is a server-first worker: it reads the server's ticks (checking
// they come in order) and acks each.
func (f *fleet) listen(c *survConn, tc *echo.TickConn) {
	for {
		if _, err := tc.Next(); err != nil {
			f.failed(c, err)
			return
		}
		f.succeeded(c)
	}
}

func (f *fleet) succeeded(c *survConn) {
	now := time.Now()
	f.mu.Lock()
	c.oks = append(c.oks, now)
	f.mu.Unlock()
}

// failed records err, unless it is the final deadline ending the run.
func (f *fleet) failed(c *survConn, err error) {
	if f.final.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	f.mu.Lock()
	c.err, c.errAt = err, time.Now()
	f.mu.Unlock()
}

// waitExchanged waits until every connection opened so far has exchanged
// at least once after since, or one broke, or the timeout; it returns the
// broken connections and how many had not exchanged yet.
func (f *fleet) waitExchanged(since time.Time, timeout time.Duration) (broken []string, waiting int) {
	deadline := time.Now().Add(timeout)
	for {
		f.mu.Lock()
		broken, waiting = nil, 0
		for _, c := range f.conns {
			switch {
			case c.err != nil:
				broken = append(broken, fmt.Sprintf("%d (%s): %v", c.id, c.kind, c.err))
			case len(c.oks) == 0 || c.oks[len(c.oks)-1].Before(since):
				waiting++
			}
		}
		f.mu.Unlock()
		if len(broken) > 0 || waiting == 0 || time.Now().After(deadline) {
			return broken, waiting
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the run at end: every connection's deadline becomes end, the
// workers return, and the connections are closed. It fails the test if a
// worker does not return within 15 s after end.
func (f *fleet) stop(t *testing.T, end time.Time) {
	t.Helper()
	f.final.Store(true)
	f.mu.Lock()
	for _, c := range f.conns {
		c.conn.SetDeadline(end)
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(end) + 15*time.Second):
		// A safety net for a worker that hangs, not a measure: under
		// emulation a starved VM has woken goroutines seconds late.
		f.close()
		t.Fatalf("connection workers still running 15 s after the end of the run")
	}
	f.close()
}

// close closes every connection and waits for the workers (idempotent).
func (f *fleet) close() {
	f.mu.Lock()
	for _, c := range f.conns {
		c.conn.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// oldestYoung returns when the first young connection was opened (zero
// if none was).
func (f *fleet) oldestYoung() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, c := range f.conns {
		if c.young && (first.IsZero() || c.opened.Before(first)) {
			first = c.opened
		}
	}
	return first
}

// survivalRow is the outcome of one failover: one line of the table.
type survivalRow struct {
	mode, sync      string
	directors       int
	total, survived int
	young, youngOK  int
	longest, median time.Duration // stall of the surviving connections: longest / median of their longest
	preCut          time.Duration // longest gap in the 2 s before the cut: what the harness alone costs
	takeover        time.Duration // cut → the VIP on the new owner
	cpuBusy         float64       // share of the VM's CPU time busy while the fleet ran before the cut
	youngAge        [2]time.Duration
	byKind          map[string][2]int // kind → survived, total
	failures        []string          // one line per kind of failure, with a count and an example
	spread          map[string]int    // real server → connections
	notes           []string
	failed          map[netip.AddrPort]string // client end → the connection's failure
}

// analyse turns the fleet's record into a row: a connection survived if it
// never failed and exchanged in the last second before end.
func (f *fleet) analyse(cut, end time.Time) survivalRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	row := survivalRow{total: len(f.conns), byKind: map[string][2]int{}, spread: map[string]int{}, failed: map[netip.AddrPort]string{}}
	var stalls []time.Duration
	failures := map[string][]string{}
	where := map[string]map[string]int{} // failure → server (and the source it saw) → count
	for _, c := range f.conns {
		server := c.hello.Name
		if p := c.hello.Peer.Addr(); p != f.src {
			server += "<-" + p.String() // FULLNAT: the source address the server saw
		}
		row.spread[server]++
		fail := ""
		k := row.byKind[c.kind]
		k[1]++
		if c.young {
			row.young++
			age := cut.Sub(c.opened)
			if row.young == 1 || age < row.youngAge[0] {
				row.youngAge[0] = age
			}
			row.youngAge[1] = max(row.youngAge[1], age)
		}
		// Gaps between consecutive exchanges around the cut: from the
		// last one before it (or the opening) to the end of the run.
		prev := c.opened
		var gap time.Duration
		for _, ok := range c.oks {
			if ok.Before(cut.Add(-2 * time.Second)) {
				prev = ok
				continue
			}
			if ok.Before(cut) {
				row.preCut = max(row.preCut, ok.Sub(prev))
			} else {
				gap = max(gap, ok.Sub(prev))
			}
			prev = ok
		}
		gap = max(gap, end.Sub(prev))
		switch {
		case c.err != nil:
			fail = c.kind + " " + classify(c.err)
			failures[fail] = append(failures[fail],
				fmt.Sprintf("conn %d (%s, %s) after %.1fs: %v", c.id, c.hello.Name, ageName(c.young), c.errAt.Sub(cut).Seconds(), c.err))
		case end.Sub(prev) > time.Second:
			fail = c.kind + " stalled"
			failures[fail] = append(failures[fail],
				fmt.Sprintf("conn %d (%s, %s): no exchange in the last %.1fs", c.id, c.hello.Name, ageName(c.young), end.Sub(prev).Seconds()))
		default:
			row.survived++
			k[0]++
			if c.young {
				row.youngOK++
			}
			stalls = append(stalls, gap)
		}
		row.byKind[c.kind] = k
		if fail != "" {
			row.failed[c.local] = fail
			if where[fail] == nil {
				where[fail] = map[string]int{}
			}
			where[fail][server]++
		}
	}
	if len(stalls) > 0 {
		row.longest, row.median = slices.Max(stalls), median(stalls)
	}
	keys := make([]string, 0, len(failures))
	for k := range failures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row.failures = append(row.failures, fmt.Sprintf("%d %s %v, e.g. %s", len(failures[k]), k, where[k], failures[k][0]))
	}
	return row
}

func ageName(young bool) string {
	if young {
		return "young"
	}
	return "old"
}

// classify names an error for the failure summary.
func classify(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, io.EOF):
		return "closed (EOF)"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ETIMEDOUT):
		return "TCP timeout"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case strings.Contains(err.Error(), "payload"), strings.Contains(err.Error(), "after tick"):
		return "wrong payload"
	}
	return "other error"
}

// survivalTable formats rows as the table for the log and docs/performance.md.
func survivalTable(rows []survivalRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-4s %-4s %-9s %-7s %-8s %-8s %-8s %-8s %-12s %-6s %s\n", "mode", "dirs", "sync", "survived", "young",
		"longest", "median", "pre-cut", "takeover", "young age", "cpu", "client-first / server-first")
	for _, r := range rows {
		cf, sf := r.byKind[clientFirst], r.byKind[serverFirst]
		fmt.Fprintf(&b, "%-8s %-4d %-4s %-9s %-7s %-8s %-8s %-8s %-8s %-12s %-6s %d/%d / %d/%d\n", r.mode, r.directors, r.sync,
			fmt.Sprintf("%d/%d", r.survived, r.total), fmt.Sprintf("%d/%d", r.youngOK, r.young),
			secs(r.longest), secs(r.median), secs(r.preCut), secs(r.takeover),
			secs(r.youngAge[0])+"-"+secs(r.youngAge[1]), fmt.Sprintf("%.0f%%", 100*r.cpuBusy), cf[0], cf[1], sf[0], sf[1])
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// mhTable returns h's IPVS services (sorted) with their destinations in the
// kernel's list order, which Maglev's table depends on, with forwarding
// method and weight. Read over netlink: `ipvsadm -Ln` sorts destinations
// and would hide the order.
func mhTable(t *testing.T, h *topo.Host) string {
	t.Helper()
	k := openIPVS(t, h)
	defer k.Close()
	svcs, err := k.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(svcs, func(a, b ipvs.Service) int { return a.ServiceKey.Compare(b.ServiceKey) })
	var b strings.Builder
	for _, s := range svcs {
		b.WriteString(s.String() + "\n")
		for _, d := range destinations(t, k, s.ServiceKey) {
			fmt.Fprintf(&b, "  -> %s %s %d\n", d.DestinationKey, d.Forwarding, d.Weight)
		}
	}
	return b.String()
}

// fdLimit checks the open-file limit: the fleet holds 400 sockets (both
// ends live in this process) plus lvsd's and the servers'.
func fdLimit(t *testing.T, need uint64) {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur < need {
		r.Cur = min(need, r.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur < need {
			t.Fatalf("open-file limit %d (max %d), need %d: %v", r.Cur, r.Max, need, err)
		}
	}
}

// cpuTimes returns the VM's busy and total CPU time (jiffies, all CPUs)
// from /proc/stat: idle and iowait count as not busy.
func cpuTimes(t *testing.T) (busy, total uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		t.Fatalf("/proc/stat starts with %q", line)
	}
	for i, v := range f[1:min(len(f), 9)] { // user … steal; guest time is already in user
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// ipvsEntries explains failures from the new owner's IPVS connection
// table (`ipvsadm -Lnc`, taken a second before the end of the run): per
// kind of failure, how many of the failed connections have an entry
// there, and in which state. A connection the new owner had no entry for
// was never synced to it (and, in NAT, the real server's packets reach the
// client untranslated).
func ipvsEntries(owner, table string, failed map[netip.AddrPort]string) []string {
	if len(failed) == 0 {
		return nil
	}
	state := map[netip.AddrPort]string{}
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "TCP" {
			continue
		}
		if src, err := netip.ParseAddrPort(f[3]); err == nil {
			state[src] = f[2]
		}
	}
	count := map[string]map[string]int{} // failure → state on the owner → connections
	for local, fail := range failed {
		st := state[local]
		if st == "" {
			st = "no entry"
		}
		if count[fail] == nil {
			count[fail] = map[string]int{}
		}
		count[fail][st]++
	}
	var out []string
	for fail, states := range count {
		out = append(out, fmt.Sprintf("%s: IPVS entries on %s 1 s before the end: %v", fail, owner, states))
	}
	sort.Strings(out)
	return out
}
