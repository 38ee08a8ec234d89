package planner

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"

	"github.com/lvsd/lvsd/agent/config"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
	nat "github.com/lvsd/lvsd/nat/rules"
)

// piece is what Build makes of one configured service on its own: its IPVS
// services, its nftables rules, and the addresses that move with its VIP.
// Pieces are kept between reloads, so a reload builds only the services
// that changed and adds the pieces up again.
type piece struct {
	src      *config.Service   // what it was made of
	services []*VirtualService // sorted by key
	// marks and snat are the service's nftables rules, the parts of a
	// nat.Spec a service has: the whole Spec made a piece 304 bytes, not
	// 200 (10,000 pieces). The VIP is src's: a copy of it here made a
	// piece 200 bytes, not 176.
	marks    []nat.MarkRule
	snat     []nat.SNATRule
	mark     uint32
	addrs    []netip.Prefix // the service's Addresses as host prefixes
	forwards bool           // NAT or FULLNAT: the director forwards the replies
	fullnat  bool
	announce *config.Announce
	// groups are, under ECMP, each director's FULLNAT source addresses,
	// which move to a survivor when their director is lost; own is the key
	// of this director's.
	groups []VIPAddresses
	own    netip.Addr
}

// sameOutside reports whether p and q add the same to a desired state
// outside their IPVS services: VIP addresses, nftables rules, forwarding
// sysctls, firewall mark, BGP announcement, TOA program.
func (p *piece) sameOutside(q *piece) bool {
	return p.src.VIP == q.src.VIP && p.mark == q.mark && p.forwards == q.forwards && p.fullnat == q.fullnat &&
		slices.Equal(p.addrs, q.addrs) && p.src.Interface == q.src.Interface && p.src.GatewayInterface == q.src.GatewayInterface &&
		reflect.DeepEqual(p.marks, q.marks) && reflect.DeepEqual(p.snat, q.snat) && reflect.DeepEqual(p.groups, q.groups) && p.own == q.own &&
		(p.announce == nil) == (q.announce == nil) && (p.announce == nil || p.announce.Equal(*q.announce)) &&
		sameTOA(p.src, q.src)
}

// Pieces are the pieces of a configuration's services, by service name
// (nil: none made). A reload copies them and replaces the changed ones: the
// table is copy-on-write, so that copy costs what changed, not a map of
// 10,000 pieces.
type Pieces = *pieceTable

type pieceTable struct {
	byName CopyOnWriteMap[string, *piece]
}

func newPieces() Pieces { return &pieceTable{} }

// get returns the piece of the service named name, nil if none (or ps
// is nil).
func (ps *pieceTable) Get(name string) *piece {
	if ps == nil {
		return nil
	}
	return ps.byName.At(name)
}

// Source is the configured service the named piece was made of (nil: no
// such piece).
func (ps *pieceTable) Source(name string) *config.Service {
	if p := ps.Get(name); p != nil {
		return p.src
	}
	return nil
}

func (ps *pieceTable) set(name string, p *piece) { ps.byName.Set(name, p) }

func (ps *pieceTable) delete(name string) { ps.byName.Delete(name) }

func (ps *pieceTable) len() int { return ps.byName.Len() }

// clone returns a copy of ps that shares its pieces.
func (ps *pieceTable) clone() Pieces { return &pieceTable{byName: ps.byName.Clone()} }

// keys returns the keys of the IPVS services of the named services' pieces.
func (ps *pieceTable) Keys(names map[string]bool) []ipvs.ServiceKey {
	var out []ipvs.ServiceKey
	for name := range names {
		if p := ps.Get(name); p != nil {
			for _, vs := range p.services {
				out = append(out, vs.ServiceKey)
			}
		}
	}
	return out
}

// byServiceKey orders IPVS services as the desired state lists them.
func byServiceKey(a, b *VirtualService) int { return a.ServiceKey.Compare(b.ServiceKey) }

// Build computes the desired state of a director from its configuration,
// every backend at its configured weight (WithHealth applies health). It is
// pure: same input, same output, no host access.
func Build(agent *config.Agent, services []*config.Service) (Desired, error) {
	d, _, err := Rebuild(agent, services, nil, Desired{}, nil, nil)
	return d, err
}

// Rebuild is Build reusing what it made of the services not in changed:
// prev are the pieces and prevDesired the desired state of the previous
// configuration, with the same agent file. changed names every service
// added, removed or modified since (nil with prev nil: build everything);
// fresh, when not nil, are the indexes in services of every service that
// may be among them (the files read again), so that the rest is not
// looked at. It returns the desired state and the pieces to keep; prev is
// not modified.
func Rebuild(agent *config.Agent, services []*config.Service, prev Pieces, prevDesired Desired, changed map[string]bool, fresh []int) (Desired, Pieces, error) {
	var pieces Pieces
	var removed []ipvs.ServiceKey // the IPVS services of the changed services' old pieces
	if prev == nil {
		pieces = newPieces()
	} else {
		// The unchanged pieces are the previous ones: a copy of the map,
		// not a look-up of every service's name (a tenth of a one-file
		// change among 10,000 services).
		pieces, removed = prev.clone(), prev.Keys(changed)
		for name := range changed {
			pieces.delete(name)
		}
	}
	var added []*VirtualService
	// outsideSame: every changed service was there before and adds the same
	// outside its IPVS services, and none went: the rest of prevDesired
	// stands (a weight or a backend changed), and adding up every piece
	// again, a pass over every service, is not needed.
	outsideSame := prev != nil
	isChanged := config.NamesOf(changed)
	candidates := services
	if prev != nil && fresh != nil {
		candidates = make([]*config.Service, len(fresh))
		for i, j := range fresh {
			candidates[i] = services[j]
		}
	}
	for _, s := range candidates {
		if prev != nil && !isChanged.Has(s.Name) {
			continue
		}
		p, err := buildPiece(agent, s)
		if err != nil {
			return Desired{}, nil, err
		}
		old := prev.Get(s.Name)
		pieces.set(s.Name, p)
		added = append(added, p.services...)
		outsideSame = outsideSame && old != nil && old.sameOutside(p)
	}
	if pieces.len() != len(services) {
		// A service changed that changed does not name: build everything
		// rather than keep a wrong piece.
		return Rebuild(agent, services, nil, Desired{}, nil, nil)
	}
	slices.SortFunc(added, byServiceKey)
	slices.SortFunc(removed, ipvs.ServiceKey.Compare)
	if outsideSame && pieces.len() == prev.len() {
		d := prevDesired
		d.Services = mergeServices(prevDesired.Services, removed, added)
		return d, pieces, nil
	}
	if err := checkMarks(services, pieces); err != nil {
		return Desired{}, nil, err
	}
	d, err := assemble(agent, services, pieces)
	if err != nil {
		return Desired{}, nil, err
	}
	if prev == nil {
		d.Services = added
		if c := agent.Cluster; c != nil && c.ConnSync.Enabled {
			d.Services = insertService(d.Services, pusherService(c.ConnSync))
		}
	} else {
		d.Services = mergeServices(prevDesired.Services, removed, added)
	}
	return d, pieces, nil
}

func buildPiece(agent *config.Agent, s *config.Service) (*piece, error) {
	snat, err := snatAddresses(agent, s)
	if err != nil {
		return nil, err
	}
	p := &piece{src: s, mark: FirewallMark(s.Name), forwards: s.Forwarding == config.NAT || s.Forwarding == config.FullNAT,
		fullnat: s.Forwarding == config.FullNAT, announce: s.Announce}
	var spec nat.Spec
	p.services, spec = buildService(s, p.mark, snat)
	p.marks, p.snat = spec.Marks, spec.SNAT
	slices.SortFunc(p.services, byServiceKey)
	for _, a := range s.Addresses() {
		p.addrs = append(p.addrs, netip.PrefixFrom(a, a.BitLen()))
	}
	for _, home := range slices.Sorted(maps.Keys(s.SNATByDirector)) {
		g := VIPAddresses{VIP: s.SNATByDirector[home][0], Home: home}
		for _, a := range s.SNATByDirector[home] {
			g.Addresses = append(g.Addresses, netip.PrefixFrom(a, a.BitLen()))
		}
		p.groups = append(p.groups, g)
		if home == agent.Node {
			p.own = g.VIP
		}
	}
	return p, nil
}

// snatAddresses returns the source addresses this director gives s's
// connections: its own of fullnat.per_director under ECMP, where every
// director serves the VIP and the real servers' replies must come back to
// the one that translated them; fullnat.source_addresses, which move with
// the VIP, otherwise.
func snatAddresses(agent *config.Agent, s *config.Service) ([]netip.Addr, error) {
	ecmp := agent.Cluster != nil && agent.Cluster.Mode == config.ModeECMP
	switch {
	case ecmp && s.Forwarding == config.FullNAT && len(s.SNATByDirector) == 0:
		return nil, fmt.Errorf("%s:%d: service %q: forwarding fullnat with cluster mode ecmp needs fullnat.per_director: "+
			"the source addresses of each director, by node name (docs/ecmp.md, \"FULLNAT\")", s.File, s.Line, s.Name)
	case ecmp && s.Forwarding == config.FullNAT && !agent.Cluster.ConnSync.Enabled:
		return nil, fmt.Errorf("%s:%d: service %q: forwarding fullnat with cluster mode ecmp needs cluster.conn_sync: "+
			"a connection the routers move to another director continues there only from the state sync brings", s.File, s.Line, s.Name)
	case ecmp && s.Forwarding == config.FullNAT && len(s.SNATByDirector[agent.Node]) == 0:
		return nil, fmt.Errorf("%s:%d: service %q: fullnat.per_director has no addresses for this director (node %q)",
			s.File, s.Line, s.Name, agent.Node)
	case ecmp && s.Forwarding == config.FullNAT:
		return s.SNATByDirector[agent.Node], nil
	case ecmp && s.Forwarding != config.DR:
		return nil, fmt.Errorf("%s:%d: service %q: forwarding %s does not work with cluster mode ecmp: %s",
			s.File, s.Line, s.Name, s.Forwarding, ecmpForwarding[s.Forwarding])
	case len(s.SNATByDirector) > 0:
		return nil, fmt.Errorf("%s:%d: service %q: fullnat.per_director is for cluster mode ecmp, where every director "+
			"serves the VIP; with one holder at a time use fullnat.source_addresses", s.File, s.Line, s.Name)
	}
	return s.SNATAddresses, nil
}

// addGroups adds the FULLNAT source addresses of each director p names to
// groups, keyed by their first; services of one director's addresses must
// agree on them.
func addGroups(groups map[netip.Addr]VIPAddresses, p *piece, s *config.Service) error {
	for _, g := range p.groups {
		if prev, ok := groups[g.VIP]; ok && !reflect.DeepEqual(prev, g) {
			return fmt.Errorf("%s:%d: service %q: fullnat.per_director gives %s to %s as %v, another service to %s as %v: "+
				"directors' source addresses must be the same in every service that shares them",
				s.File, s.Line, s.Name, g.VIP, g.Home, g.Addresses, prev.Home, prev.Addresses)
		}
		groups[g.VIP] = g
	}
	return nil
}

// checkMarks refuses two services whose names hash to the same firewall
// mark, naming the later one.
func checkMarks(services []*config.Service, pieces Pieces) error {
	marks := make(map[uint32]string, len(services))
	for _, s := range services {
		mark := pieces.Get(s.Name).mark
		if other, ok := marks[mark]; ok {
			return fmt.Errorf("%s:%d: services %q and %q get the same firewall mark %#x; rename one", s.File, s.Line, other, s.Name, mark)
		}
		marks[mark] = s.Name
	}
	return nil
}

// assemble adds the pieces up to everything of the desired state but its
// IPVS services: the VIPs and their addresses, the nftables ruleset, the
// sysctls, the sync daemons and the BGP announcements.
func assemble(agent *config.Agent, services []*config.Service, pieces Pieces) (Desired, error) {
	d := Desired{Interface: agent.Interface, VIPDevice: agent.Interface, Sysctls: map[string]string{}, Timeouts: agent.IPVS.Timeouts}
	if agent.BGP != nil {
		d.VIPDevice, d.Announce = "lo", announcePolicy(agent.BGP, services)
	}
	var spec nat.Spec
	vips := map[netip.Addr]map[netip.Prefix]bool{}
	var forwardV4, forwardV6, fullnat bool
	groups := map[netip.Addr]VIPAddresses{}
	needs := map[netip.Addr]map[netip.Addr]bool{}
	placed := placements{}
	faces := map[string]bool{agent.Interface: true} // the interfaces the services' addresses face
	forwarders := map[string]bool{}                 // those of NAT and FULLNAT services
	for _, s := range services {
		p := pieces.Get(s.Name)
		if err := addGroups(groups, p, s); err != nil {
			return Desired{}, err
		}
		if err := placed.add(agent, p); err != nil {
			return Desired{}, err
		}
		for _, dev := range []string{cmp.Or(s.Interface, agent.Interface), cmp.Or(s.GatewayInterface, s.Interface, agent.Interface)} {
			faces[dev] = true
			forwarders[dev] = forwarders[dev] || p.forwards
		}
		spec.Marks = append(spec.Marks, p.marks...)
		spec.SNAT = append(spec.SNAT, p.snat...)
		if vips[s.VIP] == nil {
			vips[s.VIP] = map[netip.Prefix]bool{}
		}
		for _, a := range p.addrs {
			vips[s.VIP][a] = true
		}
		if p.own.IsValid() {
			if needs[s.VIP] == nil {
				needs[s.VIP] = map[netip.Addr]bool{}
			}
			needs[s.VIP][p.own] = true
		}
		forwardV4 = forwardV4 || p.forwards && s.VIP.Is4()
		forwardV6 = forwardV6 || p.forwards && s.VIP.Is6()
		fullnat = fullnat || p.fullnat
	}
	for _, vip := range slices.SortedFunc(maps.Keys(vips), netip.Addr.Compare) {
		addrs := slices.SortedFunc(maps.Keys(vips[vip]), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		d.VIPs = append(d.VIPs, VIPAddresses{VIP: vip, Addresses: addrs,
			Needs:      slices.SortedFunc(maps.Keys(needs[vip]), netip.Addr.Compare),
			Interfaces: placed.elsewhere(addrs, agent.Interface)})
	}
	for _, key := range slices.SortedFunc(maps.Keys(groups), netip.Addr.Compare) {
		if vips[key] != nil {
			return Desired{}, fmt.Errorf("%s is a VIP and director %s's FULLNAT source address", key, groups[key].Home)
		}
		d.VIPs = append(d.VIPs, groups[key])
		for _, a := range groups[key].Addresses {
			spec.GuardSNAT = append(spec.GuardSNAT, a.Addr())
		}
	}
	slices.SortFunc(d.VIPs, func(a, b VIPAddresses) int { return a.VIP.Compare(b.VIP) })
	if len(groups) > 0 {
		d.PeerSNAT = peerSNAT(services, pieces)
	}
	spec.DropRedirects6 = forwardV6
	var err error
	if d.TOA, err = desiredTOA(agent, services); err != nil {
		return Desired{}, err
	}
	if agent.BGP != nil {
		// The VIPs are on lo: the director must not answer ARP for them on
		// its link (the routers reach it by its own address), as a DR real
		// server does not. The kernel takes the larger of "all" and the
		// interface's value.
		for dev := range faces {
			d.Sysctls["net/ipv4/conf/"+dev+"/arp_ignore"] = "1"
			d.Sysctls["net/ipv4/conf/"+dev+"/arp_announce"] = "2"
		}
	}
	maps.Copy(d.Sysctls, nat.ForwardingSysctls(forwardV4, forwardV6, agent.Interface))
	for dev, forwards := range forwarders {
		if forwards {
			maps.Copy(d.Sysctls, nat.ForwardingSysctls(forwardV4, forwardV6, dev))
		}
	}
	if fullnat {
		maps.Copy(d.Sysctls, nat.FullNATSysctls())
	}
	if len(services) > 0 {
		maps.Copy(d.Sysctls, ipvs.ConnectionExpirySysctls())
	}
	if c := agent.Cluster; c != nil {
		// sloppy_tcp lets a new owner pick up connections from their next
		// packet, with or without sync; the sync thresholds matter only with it.
		maps.Copy(d.Sysctls, ipvs.RecommendedSyncSysctls().Sysctls())
		if fullnat {
			// A FULLNAT connection another director carried for a while
			// comes back to conntrack entries that never saw what passed
			// meanwhile (a VIP moved away and back, or under ECMP a
			// re-hash: each director sees one direction): window tracking
			// would take the next acknowledgements as invalid, and an
			// invalid packet leaves IPVS untranslated, so the real server
			// resets it (docs/cluster.md, "FULLNAT").
			d.Sysctls[nat.SysctlTCPBeLiberal] = "1"
		}
		// Only the directors may reach the cluster port: its one reader
		// serves the heartbeats too (docs/security.md).
		spec.ClusterPort = &nat.ClusterPort{Port: c.Port(), Allow: c.Sources(), Rate: c.RateLimit}
		if c.ConnSync.Enabled {
			spec.SyncPorts, spec.SyncGroup = []uint16{c.ConnSync.Port, c.ConnSync.Port + 1}, ipvs.DefaultSyncGroup
			d.Daemons = syncDaemons(c.ConnSync)
		}
	}
	if d.NAT, err = nat.Render(spec); err != nil {
		return Desired{}, fmt.Errorf("rendering nftables rules: %w", err)
	}
	return d, nil
}

// mergeServices returns prev without the services keyed in removed, merged
// with added (both sorted): runs of prev between them are copied whole,
// found by binary search, not tested one by one. The internal services
// (the pusher) come from the agent file and stay.
func mergeServices(prev []*VirtualService, removed []ipvs.ServiceKey, added []*VirtualService) []*VirtualService {
	out := make([]*VirtualService, 0, len(prev)+len(added))
	from := 0 // prev[:from] is in out, or removed
	for len(removed) > 0 || len(added) > 0 {
		var next ipvs.ServiceKey // the lower of the next removed and the next added
		if len(added) == 0 || len(removed) > 0 && removed[0].Compare(added[0].ServiceKey) <= 0 {
			next = removed[0]
		} else {
			next = added[0].ServiceKey
		}
		i := from + sort.Search(len(prev)-from, func(j int) bool { return prev[from+j].ServiceKey.Compare(next) >= 0 })
		out = append(out, prev[from:i]...)
		from = i
		if len(removed) > 0 && removed[0] == next {
			if i < len(prev) && prev[i].ServiceKey == next && !prev[i].Internal {
				from = i + 1
			}
			removed = removed[1:]
		}
		if len(added) > 0 && added[0].ServiceKey == next {
			out, added = append(out, added[0]), added[1:]
		}
	}
	return append(out, prev[from:]...)
}

func insertService(s []*VirtualService, vs *VirtualService) []*VirtualService {
	i, _ := slices.BinarySearchFunc(s, vs.ServiceKey, func(x *VirtualService, k ipvs.ServiceKey) int { return x.ServiceKey.Compare(k) })
	return slices.Insert(s, i, vs)
}
