package main

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// fullnatTakeover restores the conntrack entries of FULLNAT connections
// when this director takes a VIP over (nat/conntrack.go says why): it is the
// agent's address manager, and before it adds the VIP or a SNAT address of
// a FULLNAT service it creates, from the IPVS connections the sync daemon
// brought, the entries the old owner had. It is also the agent's nftables
// door, only to learn the ruleset in force: that says which VIPs are
// FULLNAT, with which ct mark and SNAT range, exactly as the old owner's
// kernel applied it, and follows configuration reloads.
//
// A failed restore is logged and never fails the add: the VIP must move
// whatever happens, and the connections without an entry are no worse off
// than without a restore.
type fullnatTakeover struct {
	arp.Addresses // the leases
	nat.Interface // the director's nftables tables
	conns         ipvs.ConnectionLister
	ct            nat.ConntrackRestorer
	log           *slog.Logger
	now           func() time.Time

	mu sync.Mutex // guards all following fields
	rs nat.Ruleset
	// restored holds the FULLNAT VIPs whose connections were restored
	// since one of their addresses was last deleted: a takeover adds the VIP
	// and its SNAT addresses one by one, in address order, and restores once.
	restored map[netip.Addr]bool
	// byVIP is the IPVS connection table read at readAt, by VIP: a takeover
	// of many VIPs adds their addresses in one burst, and reading and
	// parsing the whole table once per VIP would cost VIPs x connections.
	byVIP  map[netip.Addr][]ipvs.Connection
	readAt time.Time
}

// tableReuse is how long a read of the connection table serves the VIPs
// that follow: a takeover's burst, well under a second, while the old
// owner's sync has stopped.
const tableReuse = time.Second

// withFullNATRestore wraps addrs and k.NAT into a fullnatTakeover that
// starts from rs, the configured ruleset. Without a connection table or
// conntrack writer in k (test fakes) it returns them unwrapped.
func withFullNATRestore(k *agent.Kernel, rs nat.Ruleset, addrs arp.Addresses, log *slog.Logger) (arp.Addresses, nat.Interface) {
	conns, ok1 := k.IPVS.(ipvs.ConnectionLister)
	ct, ok2 := k.NAT.(nat.ConntrackRestorer)
	if !ok1 || !ok2 {
		return addrs, k.NAT
	}
	t := &fullnatTakeover{Addresses: addrs, Interface: k.NAT, conns: conns, ct: ct, log: log, now: time.Now,
		rs: rs, restored: map[netip.Addr]bool{}}
	return t, t
}

// Apply implements nat.Interface: the applied ruleset is the one in force.
func (t *fullnatTakeover) Apply(ctx context.Context, rs nat.Ruleset) error {
	if err := t.Interface.Apply(ctx, rs); err != nil {
		return err
	}
	t.mu.Lock()
	t.rs = rs
	t.mu.Unlock()
	return nil
}

// Add implements arp.Addresses: the FULLNAT connections that depend on the
// address are restored first.
func (t *fullnatTakeover) Add(ctx context.Context, dev string, p netip.Prefix) error {
	t.mu.Lock()
	rs := t.rs
	vips := slices.DeleteFunc(rs.FullNATVIPs(p.Addr()), func(v netip.Addr) bool { return t.restored[v] })
	t.mu.Unlock()
	if len(vips) > 0 {
		t.restore(ctx, rs, vips)
	}
	if err := t.Addresses.Add(ctx, dev, p); err != nil {
		return err
	}
	t.mu.Lock()
	for _, v := range vips {
		t.restored[v] = true
	}
	t.mu.Unlock()
	return nil
}

// Delete implements arp.Addresses: losing an address of a FULLNAT VIP
// means the next takeover restores again.
func (t *fullnatTakeover) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	err := t.Addresses.Delete(ctx, dev, p)
	t.mu.Lock()
	for _, v := range t.rs.FullNATVIPs(p.Addr()) {
		delete(t.restored, v)
	}
	t.mu.Unlock()
	return err
}

// restore creates the conntrack entries of the IPVS connections to vips.
func (t *fullnatTakeover) restore(ctx context.Context, rs nat.Ruleset, vips []netip.Addr) {
	start := t.now()
	byVIP, err := t.table(ctx, start)
	if err != nil {
		t.log.Error("cannot restore FULLNAT connections: reading the IPVS connection table failed", "vips", vips, "err", err)
		return
	}
	var conns []ipvs.Connection
	for _, v := range vips {
		conns = append(conns, byVIP[v]...)
	}
	var entries []nat.ConntrackEntry
	skipped := 0
	for _, c := range conns {
		e, ok := rs.FullNATEntry(nat.Protocol(c.Protocol), c.Client, c.Virtual, c.Dest)
		if !ok {
			continue // another service on the VIP, or a persistence template
		}
		if !restorable(c) {
			skipped++
			continue
		}
		e.Timeout = c.Expires
		entries = append(entries, e)
	}
	res, err := t.ct.RestoreConntrack(ctx, entries)
	level := slog.LevelInfo
	if len(entries)+skipped == 0 {
		level = slog.LevelDebug // a cold start adds every VIP
	}
	t.log.Log(ctx, level, "restored FULLNAT conntrack entries before taking the addresses", "vips", vips,
		"connections", len(entries), "created", res.Created, "existing", res.Existing, "failed", res.Failed,
		"skipped", skipped, "duration", t.now().Sub(start).Round(time.Microsecond).String())
	if err != nil {
		t.log.Error("restoring FULLNAT conntrack entries failed; those connections may be reset", "vips", vips,
			"failed", res.Failed, "err", err)
	}
}

// table returns the connection table by VIP, read again unless the last
// read is recent.
func (t *fullnatTakeover) table(ctx context.Context, now time.Time) (map[netip.Addr][]ipvs.Connection, error) {
	t.mu.Lock()
	byVIP, at := t.byVIP, t.readAt
	t.mu.Unlock()
	if byVIP != nil && now.Sub(at) < tableReuse {
		return byVIP, nil
	}
	conns, err := t.conns.Connections(ctx)
	if err != nil {
		return nil, err
	}
	byVIP = map[netip.Addr][]ipvs.Connection{}
	for _, c := range conns {
		byVIP[c.Virtual.Addr()] = append(byVIP[c.Virtual.Addr()], c)
	}
	t.mu.Lock()
	t.byVIP, t.readAt = byVIP, now
	t.mu.Unlock()
	return byVIP, nil
}

// restorable says whether a connection can still carry data both ways:
// TCP until one side's FIN is answered (IPVS's states, ip_vs_proto_tcp.c),
// UDP always. A handshake in progress is left to the client's retransmitted
// SYN, a closing one to its timers.
func restorable(c ipvs.Connection) bool {
	switch c.Protocol {
	case ipvs.TCP:
		return c.State == "ESTABLISHED" || c.State == "FIN_WAIT" || c.State == "CLOSE_WAIT"
	case ipvs.UDP:
		return true
	}
	return false
}
