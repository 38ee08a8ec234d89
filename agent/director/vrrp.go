package director

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster/vrrp"
)

// Router is what the director uses of a VRRP virtual router (vrrp.Router).
type Router interface {
	agent.VIPOwnership
	// Healthy reports whether the router runs: the VIP leases are renewed
	// only while it does.
	Healthy() bool
	// Stop hands the VIPs over: a master's last advertisement has
	// priority 0, so a backup takes over at once.
	Stop(ctx context.Context) error
}

// VRRPRouter is one virtual router to start (Options.StartVRRP): on
// Interface, of one address family, sending from an address that is not
// a VIP.
type VRRPRouter struct {
	Interface string
	IPv6      bool
	Config    vrrp.Config
	IsVIP     func(netip.Addr) bool
}

// startVRRP starts the virtual routers of mode vrrp, one per address
// family of the VIPs (IPv4 alone when there are none yet), in place of
// lvsd's own cluster. The VIP addresses go through arp.Leased, as in a
// cluster: a killed agent's VIPs vanish after their lifetime instead of
// staying beside the new master's. No connection sync (docs/cluster.md,
// "VRRP mode").
func startVRRP(ctx context.Context, o Options, k *agent.Kernel, bgCtx context.Context) (member, error) {
	cfg, log := o.Config, o.Log
	c := cfg.Agent.Cluster
	if o.Leases == nil || o.StartVRRP == nil {
		return member{}, errors.New("mode vrrp needs Options.Leases and StartVRRP")
	}
	if o.RaisePriority != nil {
		if err := o.RaisePriority(c.Nice); err != nil {
			log.Warn("cannot raise the scheduling priority; advertisements may be late on a loaded host", "nice", c.Nice, "err", err)
		}
	}
	leases := &arp.Leased{Addrs: o.Leases, Announcer: k.Announcer, Lifetime: c.AddressLifetime, Log: log}
	k.Addrs, k.Announcer = leases, leases
	// A killed predecessor's VIPs may still be on the interface: a backup
	// must not hold them.
	stale, err := agent.NewHolder(*k, nil, cfg.Agent.StateDir, log)
	if err == nil {
		err = stale.ReleaseStale(ctx)
	}
	if err != nil {
		log.Error("removing VIP addresses left by a previous run", "err", err)
	}
	vips := map[netip.Addr]bool{}
	var has4, v6 bool
	for _, p := range planner.Addresses(cfg.Desired.VIPs) {
		vips[p.Addr()] = true
		has4, v6 = has4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	v4 := has4 || !v6 // IPv4 alone when there are no VIPs yet
	v := c.VRRP
	rc := vrrp.Config{VRID: v.VirtualRouterID, Priority: v.Priority, Interval: uint16(v.AdvertInterval / vrrp.Centisecond),
		Preempt: v.Preempt, Log: log.With("component", "vrrp")}
	var routers vrrpRouters
	for _, is6 := range []bool{false, true} {
		if is6 && !v6 || !is6 && !v4 {
			continue
		}
		r, err := o.StartVRRP(bgCtx, VRRPRouter{Interface: v.Interface, IPv6: is6, Config: rc, IsVIP: func(a netip.Addr) bool { return vips[a] }})
		if err != nil {
			routers.stop(log)
			return member{}, fmt.Errorf("VRRP on %s: %w", v.Interface, err)
		}
		routers = append(routers, r)
	}
	own := routers.ownership(bgCtx)
	runCtx, stop := context.WithCancel(bgCtx)
	var runs sync.WaitGroup
	leases.Keep = routers.healthy
	runs.Go(func() { leases.Run(runCtx) })
	return member{vrrp: own, routers: routers, leases: leases, stop: func() { routers.stop(log); stop(); runs.Wait() }}, nil
}

// vrrpRouters are the virtual routers of the address families.
type vrrpRouters []Router

func (rs vrrpRouters) healthy() bool {
	for _, r := range rs {
		if !r.Healthy() {
			return false
		}
	}
	return len(rs) > 0
}

func (rs vrrpRouters) stop(log interface{ Error(string, ...any) }) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	for _, r := range rs {
		if err := r.Stop(ctx); err != nil {
			log.Error("stopping the VRRP router", "err", err)
		}
	}
}

// vrrpReporter is what the status reads of a router (vrrp.Router); the
// fakes of the tests need not report.
type vrrpReporter interface {
	Status() vrrp.Status
	Drops() map[string]uint64
}

var _ vrrpReporter = (*vrrp.Router)(nil)

// status reports the routers that can say how they are.
func (rs vrrpRouters) status() []views.VRRPRouterStatus {
	var out []views.VRRPRouterStatus
	for _, r := range rs {
		if rep, ok := r.(vrrpReporter); ok {
			out = append(out, vrrpStatus(rep.Status(), rep.Drops()))
		}
	}
	return out
}

func vrrpStatus(s vrrp.Status, drops map[string]uint64) views.VRRPRouterStatus {
	v := views.VRRPRouterStatus{Family: "ipv4", VRID: int(s.VRID), State: s.State.String(), Priority: int(s.Priority),
		AdvertInterval: (time.Duration(s.Interval) * vrrp.Centisecond).Seconds(), BecameMaster: s.BecameMaster}
	if s.IPv6 {
		v.Family = "ipv6"
	}
	if s.Master.IsValid() {
		v.Master = s.Master.String()
	}
	if len(drops) > 0 {
		v.Dropped = drops
	}
	return v
}

// ownership is the routers as one VIPOwnership: each router holds the VIPs
// of its family.
func (rs vrrpRouters) ownership(ctx context.Context) agent.VIPOwnership {
	if len(rs) == 1 {
		return rs[0]
	}
	m := &mergedOwnership{rs: rs, changed: make(chan struct{}, 1)}
	for _, r := range rs {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-r.Changed():
					select {
					case m.changed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return m
}

type mergedOwnership struct {
	rs      vrrpRouters
	changed chan struct{}
}

func (m *mergedOwnership) Serve(vips []netip.Addr) {
	for _, r := range m.rs {
		r.Serve(vips)
	}
}

func (m *mergedOwnership) ServeHomes(map[netip.Addr]string) {}

func (m *mergedOwnership) Holds(vip netip.Addr) bool {
	for _, r := range m.rs {
		if r.Holds(vip) {
			return true
		}
	}
	return false
}

func (m *mergedOwnership) AddressChanged(netip.Addr, bool) {}

func (m *mergedOwnership) Changed() <-chan struct{} { return m.changed }
