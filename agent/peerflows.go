package agent

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/nat"
)

// FULLNAT under ECMP. Each director sources its connections from its own
// addresses (fullnat.per_director), so the real servers' replies come
// back to the director that translated the first packet. The routers
// re-hash flows whenever a director joins or leaves, and the client's
// next packets then reach another director, which must send them on with
// the same source address: it needs the first director's conntrack entry,
// not only its IPVS entry. So every director creates, for every FULLNAT
// connection another director sends it through connection sync, the
// entry the connection's first director has (nat/conntrack.go), with that
// director's source addresses. When a director is lost, the survivor that takes its source
// addresses over (cluster ownership, "Home") finds the entries there
// already. IPVS drops each entry with its own connection
// (ip_vs_conn_drop_conntrack), so they go as the records expire.
//
// Which director translated a connection is the record's Origin: its
// sender, unless the sender got it through sync itself (a flow the routers
// moved), whose relay then names the first director (connsync/origins.go).
// A record without one is skipped: an entry with the wrong source address
// is worse than none (the director would translate the flow to its own
// addresses, and the real server would reset it either way).

// peerRules are what a director needs to turn another's connections into
// conntrack entries: its FULLNAT rules in force and every director's
// source addresses.
type peerRules struct {
	rs   nat.Ruleset
	snat map[uint32]map[string]planner.SNATRange
}

// peers counts the other directors with source addresses.
func (r peerRules) peers() int {
	names := map[string]bool{}
	for _, m := range r.snat {
		for name := range m {
			names[name] = true
		}
	}
	return max(0, len(names)-1)
}

// peerBatch is entries with the director each one's connection came from.
type peerBatch struct {
	entries []nat.ConntrackEntry
	origins []string
}

// peerQueue bounds the batches waiting for the kernel; maxEarly bounds
// the connections kept from before the first pass (a joining director
// gets every other's replayed before it has programmed anything).
const (
	peerQueue = 256
	maxEarly  = 1 << 20
)

// PeerFlows creates the conntrack entries of the other directors' FULLNAT
// connections as connection sync brings them. Applied takes them from
// the relay; Run writes them on a goroutine of its own.
type PeerFlows struct {
	ct    nat.ConntrackRestorer
	sys   sysctl.Interface // nf_conntrack_max and _count; nil: no budget
	share int              // percent of nf_conntrack_max for peers' entries
	log   *slog.Logger
	rules atomic.Pointer[peerRules]
	set   atomic.Bool // SetRules was called
	queue chan peerBatch
	wake  chan struct{} // SetRules was called: early connections may be due

	mu    sync.Mutex // guards early
	early []connsync.Conn

	created, existing, refreshed, replaced, failed, dropped, refused atomic.Uint64
	// Gauges Run samples: the entries the budget counts and its cap, and
	// the kernel's table.
	live, limit, ctCount, ctMax atomic.Int64
}

// NewPeerFlows returns PeerFlows writing through ct, with share percent
// of nf_conntrack_max, read through sys, for the entries it creates (sys
// nil: no cap).
func NewPeerFlows(ct nat.ConntrackRestorer, sys sysctl.Interface, share int, log *slog.Logger) *PeerFlows {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PeerFlows{ct: ct, sys: sys, share: share, log: log.With("component", "peerflows"), queue: make(chan peerBatch, peerQueue),
		wake: make(chan struct{}, 1)}
}

// SetRules takes the data plane a pass programmed.
func (p *PeerFlows) SetRules(d planner.Desired) {
	if p == nil {
		return
	}
	if len(d.PeerSNAT) == 0 {
		p.rules.Store(nil)
	} else {
		p.rules.Store(&peerRules{rs: d.NAT, snat: d.PeerSNAT})
	}
	if !p.set.Swap(true) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// Applied is connsync.Config.Applied: it never blocks, and drops (and
// counts) a batch the kernel is too far behind for. Until the first pass
// has set the rules, it keeps the connections for then.
func (p *PeerFlows) Applied(conns []connsync.Conn) {
	if !p.set.Load() && p.keepEarly(conns) {
		return
	}
	r := p.rules.Load()
	if r == nil {
		return
	}
	p.enqueue(peerEntries(*r, conns))
}

// keepEarly keeps conns until the first SetRules; false: it came meanwhile.
func (p *PeerFlows) keepEarly(conns []connsync.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.set.Load() {
		return false
	}
	if len(p.early)+len(conns) > maxEarly {
		p.dropped.Add(uint64(len(conns)))
		return true
	}
	p.early = append(p.early, conns...)
	return true
}

func (p *PeerFlows) enqueue(b peerBatch) {
	if len(b.entries) == 0 {
		return
	}
	select {
	case p.queue <- b:
	default:
		p.dropped.Add(uint64(len(b.entries)))
	}
}

// Sysctls PeerFlows reads: the kernel's table and its size.
const (
	sysctlConntrackMax   = "net/netfilter/nf_conntrack_max"
	sysctlConntrackCount = "net/netfilter/nf_conntrack_count"
	// conntrackSampling is how often Run reads them: the operator may
	// resize the table, and the gauges follow the flood.
	conntrackSampling = 5 * time.Second
)

// Run creates the entries Applied queued until ctx ends.
func (p *PeerFlows) Run(ctx context.Context) {
	var lastWarn time.Time
	budget := newPeerBudget(p.share)
	p.sample(ctx, budget)
	restore := func(b peerBatch) {
		now := time.Now()
		budget.advance(now)
		if r := p.rules.Load(); r != nil { // the directors may have changed
			budget.setLimits(int(p.ctMax.Load()), r.peers())
		}
		for i, e := range b.entries {
			if !budget.counted(e) && !budget.admit(b.origins[i]) {
				b.entries[i].NoCreate = true
			}
		}
		res, err := p.ct.RestoreConntrack(ctx, b.entries)
		budget.settle(now, b.entries, b.origins, res.Outcomes)
		live, _ := budget.count()
		p.live.Store(int64(live))
		p.created.Add(uint64(res.Created))
		p.existing.Add(uint64(res.Existing))
		p.refreshed.Add(uint64(res.Refreshed))
		p.replaced.Add(uint64(res.Replaced))
		p.failed.Add(uint64(res.Failed))
		p.refused.Add(uint64(res.Absent))
		if err != nil && time.Since(lastWarn) > 10*time.Second {
			lastWarn = time.Now()
			p.log.Warn("could not create the conntrack entries of other directors' FULLNAT connections; "+
				"those connections break if the routers move them here", "failed", res.Failed, "err", err)
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSample := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-p.queue:
			restore(b)
		case now := <-tick.C:
			budget.advance(now)
			live, _ := budget.count()
			p.live.Store(int64(live))
			if now.Sub(lastSample) >= conntrackSampling {
				lastSample = now
				p.sample(ctx, budget)
			}
		case <-p.wake:
			p.mu.Lock()
			early := p.early
			p.early = nil
			p.mu.Unlock()
			if r := p.rules.Load(); r != nil {
				restore(peerEntries(*r, early))
			}
		}
	}
}

// sample reads the kernel's table size and count, and sets the budget's
// cap from the size.
func (p *PeerFlows) sample(ctx context.Context, budget *peerBudget) {
	if p.sys == nil {
		return
	}
	read := func(key string) int64 {
		v, err := p.sys.Get(ctx, key)
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	ctMax := read(sysctlConntrackMax)
	p.ctMax.Store(ctMax)
	p.ctCount.Store(read(sysctlConntrackCount))
	peers := 0
	if r := p.rules.Load(); r != nil {
		peers = r.peers()
	}
	budget.setLimits(int(ctMax), peers)
	_, limit := budget.count()
	p.limit.Store(int64(limit))
}

// PeerFlowStats counts what PeerFlows did.
type PeerFlowStats struct {
	Created   uint64 `json:"created"`   // entries created
	Existing  uint64 `json:"existing"`  // found there already: a local connection or an earlier record
	Refreshed uint64 `json:"refreshed"` // of those, given the record's timeout (and state)
	Replaced  uint64 `json:"replaced"`  // of those, another connection's with the same ports, made again
	Failed    uint64 `json:"failed"`    // refused by the kernel
	Dropped   uint64 `json:"dropped"`   // not written: the kernel was too far behind
	// RefusedBudget counts the records that would have created an entry
	// beyond the budget (peerbudget.go): none was made.
	RefusedBudget uint64 `json:"refused_budget"`
	// Live is how many entries the budget counts now, Limit its cap (0:
	// none, nf_conntrack_max unknown).
	Live  int64 `json:"live"`
	Limit int64 `json:"limit"`
	// ConntrackEntries and ConntrackMax are the kernel's table:
	// nf_conntrack_count and nf_conntrack_max, read every few seconds.
	ConntrackEntries int64 `json:"conntrack_entries"`
	ConntrackMax     int64 `json:"conntrack_max"`
}

// Stats returns the counters.
func (p *PeerFlows) Stats() PeerFlowStats {
	return PeerFlowStats{Created: p.created.Load(), Existing: p.existing.Load(), Refreshed: p.refreshed.Load(),
		Replaced: p.replaced.Load(), Failed: p.failed.Load(), Dropped: p.dropped.Load(), RefusedBudget: p.refused.Load(),
		Live: p.live.Load(), Limit: p.limit.Load(), ConntrackEntries: p.ctCount.Load(), ConntrackMax: p.ctMax.Load()}
}

// peerEntries are the conntrack entries of the FULLNAT connections among
// conns that can still carry data, with their first director's source
// addresses, and the director each came from. Pure.
func peerEntries(r peerRules, conns []connsync.Conn) peerBatch {
	var out peerBatch
	for _, c := range conns {
		closing, ok := peerState(c)
		if !c.Masquerade || !ok {
			continue
		}
		e, ok := r.rs.FullNATEntry(l4.Protocol(c.Protocol), c.Client, c.Virtual, c.Dest)
		if !ok {
			continue
		}
		rg, ok := r.snat[e.Mark][c.Origin]
		if !ok {
			continue // unknown, or not a director of the service's
		}
		// Refresh: a record says the connection is alive where it is
		// forwarded; the entry here must not expire before its IPVS entry.
		e.SNATFrom, e.SNATTo, e.Timeout, e.Refresh, e.Closing = rg.From, rg.To, min(c.Timeout, maxPeerTimeout), true, closing
		if e.Protocol == l4.UDP {
			e.CreateTimeout = min(e.Timeout, peerUDPFirstTimeout)
		}
		out.entries = append(out.entries, e)
		out.origins = append(out.origins, c.Origin)
	}
	return out
}

// IPVS's TCP states (ip_vs.h) that peerState tells apart.
const (
	tcpEstablished = 1
	tcpFinWait     = 4
	tcpTimeWait    = 5
	tcpClose       = 6
	tcpCloseWait   = 7
	tcpLastAck     = 8
)

// peerState says whether a connection's record makes an entry (ok), and
// one of a closing connection: from its first FIN on, the entry goes to
// TIME_WAIT with the close seen, so that it still carries the rest and the
// client's next connection with the same ports (a new connection to maybe
// another backend, through maybe another director) reopens it rather than
// meet a stale translation. A handshake makes none: the client's
// retransmitted SYN is scheduled again.
func peerState(c connsync.Conn) (closing, ok bool) {
	switch {
	case c.Protocol == uint8(l4.UDP):
		return false, true
	case c.Protocol != uint8(l4.TCP):
		return false, false
	case c.State == tcpEstablished:
		return false, true
	case c.State == tcpFinWait || c.State == tcpTimeWait || c.State == tcpClose || c.State == tcpCloseWait || c.State == tcpLastAck:
		return true, true
	}
	return false, false
}
