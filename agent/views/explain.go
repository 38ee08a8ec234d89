package views

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/maglev"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// RouteExplain is the API route of Explain.
const RouteExplain = "/v1/explain"

// ExplainQuery names a flow: a client (port 0: any) to a VIP and port.
type ExplainQuery struct {
	Client   netip.AddrPort
	Virtual  netip.AddrPort
	Protocol l4.Protocol
}

// Explanation says which backend a flow gets and why, from the kernel's
// live state: an existing connection entry (which wins), a persistence
// template, else the Maglev slot the kernel's ip_vs_mh computes from the
// live destination list.
type Explanation struct {
	Schema      int    `json:"schema"` // api.SchemaVersion
	Client      string `json:"client"`
	Service     string `json:"service"`
	IPVSService string `json:"ipvs_service"`
	Scheduler   string `json:"scheduler"`
	Flags       string `json:"flags,omitempty"`
	Rule        string `json:"eligibility_rule,omitempty"`
	// Backend is the destination the flow's next packet reaches; "" when
	// it is dropped or the scheduler's choice cannot be computed.
	Backend string `json:"backend"`
	// Decided says what decided: connection, persistence, maglev, none
	// (no destination can take it) or unknown (a scheduler with state).
	Decided    string         `json:"decided_by"`
	Connection *ExplainedConn `json:"connection,omitempty"`
	// Slot is the flow's Maglev slot, SlotOwner the destination holding
	// it; Rehashed counts the mh-fallback lookups past it (the owner takes
	// no new flows). HashesPort: the source port is part of the hash.
	Slot         int                `json:"slot"`
	SlotOwner    string             `json:"slot_owner,omitempty"`
	Rehashed     int                `json:"rehashed,omitempty"`
	HashesPort   bool               `json:"hashes_port"`
	Destinations []ExplainedBackend `json:"destinations"`
	// ClientAddress says what the real server sees as the connection's
	// peer and how the client's address travels (client_address).
	ClientAddress string `json:"client_address,omitempty"`
}

// ExplainedConn is the IPVS connection entry (or persistence template) that
// decides a flow.
type ExplainedConn struct {
	Backend string  `json:"backend"`
	State   string  `json:"state"`
	Expires float64 `json:"expires_seconds"`
}

// ExplainedBackend is one destination in the kernel's list order, which
// the Maglev table depends on.
type ExplainedBackend struct {
	DestinationStatus
	// SlotWeight is the weight its Maglev slots come from (the kernel's
	// last non-zero weight); Slots how many of the table's it holds.
	SlotWeight int `json:"slot_weight"`
	Slots      int `json:"slots"`
}

// errNoService is Explain's answer for a flow no service of lvsd's takes.
var errNoService = errors.New("no IPVS service of lvsd's takes this flow")

// Explain says which backend a new flow q would get now, and why.
func (v *Views) Explain(ctx context.Context, q ExplainQuery) (Explanation, error) {
	s := v.a.Published()
	if s == nil {
		return Explanation{}, errors.New("no reconcile pass has finished yet")
	}
	vs, ok := explainedService(s.Config.Desired.Services, q)
	if !ok {
		for _, m := range s.Config.Desired.Services {
			if m.ServiceKey.FWMark != 0 && m.VIP == q.Virtual.Addr() {
				return Explanation{}, fmt.Errorf("%s %s: service %s is a firewall-mark service (%s), which lvsd explain "+
					"does not resolve yet", q.Protocol, q.Virtual, m.Name, m.ServiceKey)
			}
		}
		return Explanation{}, fmt.Errorf("%s %s: %w", q.Protocol, q.Virtual, errNoService)
	}
	actual, err := v.a.ReadServices(ctx, []spec.ServiceKey{vs.ServiceKey})
	if err != nil {
		return Explanation{}, err
	}
	cur, inKernel := actual.Services.Get(vs.ServiceKey)
	if !inKernel {
		return Explanation{}, fmt.Errorf("%s (service %s) is not in the kernel", vs.ServiceKey, vs.Name)
	}
	e := Explanation{Schema: api.SchemaVersion, Client: q.Client.String(), Service: vs.Name, IPVSService: vs.ServiceKey.String(),
		Scheduler: cur.Scheduler, Flags: cur.Flags.String(), Rule: s.Eligibility.At(vs.Name).Rule, Slot: -1,
		HashesPort: cur.Flags&spec.FlagMHPort != 0, ClientAddress: clientAddressPath(s, vs.Name, q.Client)}
	mds := explainDestinations(v.healthReader(), s, vs, cur, &e)
	if table := v.a.ConnectionTable(); table != nil {
		conns, err := table.Connections(ctx)
		if err != nil {
			return Explanation{}, err
		}
		if c, by, ok := deciding(conns, cur.Service, q); ok {
			e.Backend, e.Decided = c.Dest.String(), by
			e.Connection = &ExplainedConn{Backend: c.Dest.String(), State: c.State, Expires: c.Expires.Seconds()}
		}
	}
	if cur.Scheduler != "mh" {
		if e.Decided == "" {
			e.Decided = "unknown"
		}
		return e, nil
	}
	table := maglev.New(mds)
	for i, n := range table.Slots() {
		e.Destinations[i].Slots = n
	}
	port := uint16(0)
	if e.HashesPort {
		port = q.Client.Port()
	}
	c := table.Pick(q.Client.Addr(), port, cur.Flags&spec.FlagMHFallback != 0)
	e.Slot, e.Rehashed = c.Slot, c.Rehashed
	if c.Owner >= 0 {
		e.SlotOwner = e.Destinations[c.Owner].Address
	}
	if e.Decided != "" {
		return e, nil
	}
	e.Decided = "none"
	if c.Dest >= 0 {
		e.Backend, e.Decided = e.Destinations[c.Dest].Address, "maglev"
	}
	return e, nil
}

// explainedService finds the IPVS service lvsd wants for q's VIP, port and
// protocol.
func explainedService(services []*planner.VirtualService, q ExplainQuery) (*planner.VirtualService, bool) {
	for _, vs := range services {
		k := vs.ServiceKey
		if !vs.Internal && k.FWMark == 0 && k.Protocol == q.Protocol && k.Addr == q.Virtual.Addr() && k.Port == q.Virtual.Port() {
			return vs, true
		}
	}
	return nil, false
}

// explainDestinations fills e.Destinations from the kernel's list and
// returns them as the Maglev scheduler sees them. A destination's slot
// weight is its kernel weight, or at weight 0 the weight lvsd gave it last
// (its configured slot weight; 1 for one no longer configured).
func explainDestinations(read healthReader, s *agent.Snapshot, vs *planner.VirtualService, cur planner.ActualService, e *Explanation) []maglev.Destination {
	wanted := map[spec.DestinationKey]planner.Destination{}
	for _, d := range vs.Destinations {
		wanted[d.Key()] = d
	}
	// The health of the configured ones, read at once, by position in
	// the kernel's list ("": not configured).
	keys := make([]string, len(cur.Destinations))
	for i, k := range cur.Destinations {
		if w, ok := wanted[k.DestinationKey]; ok {
			keys[i] = vs.Backend(w)
		}
	}
	var states backendStates
	states.read(read, keys)
	var mds []maglev.Destination
	for i, k := range cur.Destinations {
		ds := DestinationStatus{Address: k.DestinationKey.String(), Forwarding: k.Method(), ConfiguredWeight: -1,
			Weight: k.Weight, ActiveConns: int(k.ActiveConns), InactiveConns: int(k.InactiveConns)}
		slotWeight := k.Weight
		if w, ok := wanted[k.DestinationKey]; ok {
			ds.ConfiguredWeight = int(w.Weight)
			key := keys[i]
			ds.setHealth(s.Config.HasChecks(key), states.states[i], states.found[i], s.Eligibility.At(vs.Name), key)
			if slotWeight == 0 {
				slotWeight = int(max(w.SlotWeight, w.Weight))
			}
		}
		if slotWeight == 0 {
			slotWeight = 1
		}
		ds.setStats(k.Traffic())
		overloaded := k.UpperThreshold > 0 && uint64(k.ActiveConns)+uint64(k.InactiveConns) >= uint64(k.UpperThreshold)
		e.Destinations = append(e.Destinations, ExplainedBackend{DestinationStatus: ds, SlotWeight: slotWeight})
		mds = append(mds, maglev.Destination{Addr: k.Addr, Port: k.Port, Weight: k.Weight, LastWeight: slotWeight,
			Overloaded: overloaded})
	}
	return mds
}

// deciding finds the connection entry q's next packet belongs to (for a
// client with a port), else the persistence template of a persistent
// service: what decides before the scheduler does.
func deciding(conns []spec.Connection, svc spec.Service, q ExplainQuery) (spec.Connection, string, bool) {
	if q.Client.Port() != 0 {
		for _, c := range conns {
			if c.Protocol == q.Protocol && c.Client == q.Client && c.Virtual == q.Virtual {
				return c, "connection", true
			}
		}
	}
	if svc.Flags&spec.FlagPersistent == 0 {
		return spec.Connection{}, "", false
	}
	bits := svc.Netmask
	if bits == 0 {
		bits = q.Client.Addr().BitLen()
	}
	masked, err := q.Client.Addr().Prefix(bits)
	if err != nil {
		return spec.Connection{}, "", false
	}
	for _, c := range conns {
		if c.Protocol == 0 && c.Client.Addr() == masked.Addr() && c.Virtual.Addr() == q.Virtual.Addr() &&
			(c.Virtual.Port() == 0 || c.Virtual.Port() == q.Virtual.Port()) {
			return c, "persistence", true
		}
	}
	return spec.Connection{}, "", false
}

// serveExplain answers GET /v1/explain?client=ADDR[:PORT]&virtual=VIP:PORT&protocol=tcp.
func (v *Views) serveExplain(w http.ResponseWriter, r *http.Request) {
	q, err := ParseExplainQuery(r.URL.Query().Get("client"), r.URL.Query().Get("virtual"), r.URL.Query().Get("protocol"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e, err := v.Explain(r.Context(), q)
	switch {
	case errors.Is(err, errNoService):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		api.WriteJSON(w, e)
	}
}

// ParseExplainQuery parses a client (ADDR or ADDR:PORT), a VIP:PORT and a
// protocol (tcp, udp or sctp; "" is tcp).
func ParseExplainQuery(client, virtual, protocol string) (ExplainQuery, error) {
	var q ExplainQuery
	var err error
	if q.Client, err = netip.ParseAddrPort(client); err != nil {
		addr, aerr := netip.ParseAddr(client)
		if aerr != nil {
			return q, fmt.Errorf("client %q is not an address or address:port", client)
		}
		q.Client = netip.AddrPortFrom(addr, 0)
	}
	if q.Virtual, err = netip.ParseAddrPort(virtual); err != nil {
		return q, fmt.Errorf("%q is not VIP:PORT", virtual)
	}
	switch protocol {
	case "", "tcp":
		q.Protocol = l4.TCP
	case "udp":
		q.Protocol = l4.UDP
	case "sctp":
		q.Protocol = l4.SCTP
	default:
		return q, fmt.Errorf("protocol %q is not tcp, udp or sctp", protocol)
	}
	q.Client = netip.AddrPortFrom(q.Client.Addr().Unmap(), q.Client.Port())
	q.Virtual = netip.AddrPortFrom(q.Virtual.Addr().Unmap(), q.Virtual.Port())
	return q, nil
}

// ExplainValues are the query parameters of RouteExplain for q.
func ExplainValues(q ExplainQuery) url.Values {
	client := q.Client.String()
	if q.Client.Port() == 0 {
		client = q.Client.Addr().String()
	}
	return url.Values{"client": {client}, "virtual": {q.Virtual.String()}, "protocol": {q.Protocol.String()}}
}

// clientAddressPath says what the real server sees as the peer of a flow
// from client to service name, and how it gets there.
func clientAddressPath(s *agent.Snapshot, name string, client netip.AddrPort) string {
	who := client.Addr().String()
	if client.Port() != 0 {
		who = client.String()
	}
	for _, svc := range s.Config.Services {
		if svc.Name != name {
			continue
		}
		switch {
		case svc.Forwarding == "fullnat" && svc.ClientAddress == "toa":
			return fmt.Sprintf("the real server's applications see %s: the director's TOA program on %s adds the client's address "+
				"and port to the SYN (TCP option 254) before IPVS and the source NAT; real servers whose agent file has "+
				"realserver.client_address hand it to accept() and getpeername(), the others see the director's source address",
				who, strings.Join(s.Desired.TOA.Interfaces, ", "))
		case svc.Forwarding == "fullnat":
			return fmt.Sprintf("the real server sees a source address of the director (FULLNAT), not %s; client_address: toa "+
				"carries the client's address to real servers that run the real-server role with client_address", who)
		case svc.Forwarding == "nat":
			return fmt.Sprintf("the real server sees %s (NAT rewrites only the destination; replies return through the director)", who)
		default:
			return fmt.Sprintf("the real server sees %s (the packet arrives as the client sent it)", who)
		}
	}
	return ""
}
