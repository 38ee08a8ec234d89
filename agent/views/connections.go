package views

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// RouteConnections is the API route of Connections.
const RouteConnections = "/v1/connections"

// Bounds of a connection listing: a director may hold millions of entries,
// and a listing is for eyes and scripts, not a copy of the table.
const (
	DefaultConnectionLimit = 1000
	MaxConnectionLimit     = 100_000
)

// ConnectionQuery selects the entries Connections lists.
type ConnectionQuery struct {
	// Services are configured service names or globs, as in StatusQuery;
	// none: every entry of the kernel's table, lvsd's or not.
	Services []string
	Limit    int // at most this many entries; 0: DefaultConnectionLimit
}

// ConnectionList is the kernel's IPVS connection table, or the part of it
// of the selected services, as `ipvsadm -Lnc` lists it: the first Limit
// entries in the kernel's order, and how many matched in all.
type ConnectionList struct {
	Schema      int               `json:"schema"`
	Matched     int               `json:"matched"` // entries of the selected services
	Omitted     int               `json:"omitted"` // Matched minus those listed
	Connections []ConnectionEntry `json:"connections"`
}

// ConnectionEntry is one entry of the IPVS connection table.
type ConnectionEntry struct {
	// Protocol is tcp, udp or sctp, or "ip" for a persistence template
	// (ipvsadm's IP lines), which pins a client to a destination.
	Protocol    string  `json:"protocol"`
	Client      string  `json:"client"`
	Virtual     string  `json:"virtual"`
	Destination string  `json:"destination"`
	State       string  `json:"state"`
	Expires     float64 `json:"expires_seconds"` // without another packet
	Service     string  `json:"service,omitempty"`
}

// Connections lists the IPVS connection table, bounded by q.Limit. It
// reads the table entry by entry, keeping only what it lists, so a table
// of millions costs the read, not their memory. Safe from any goroutine.
func (v *Views) Connections(ctx context.Context, q ConnectionQuery) (ConnectionList, error) {
	s := v.a.Published()
	if s == nil {
		return ConnectionList{}, agent.ErrNotReady
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultConnectionLimit
	}
	if limit < 0 || limit > MaxConnectionLimit {
		return ConnectionList{}, fmt.Errorf("%w: limit %d is not between 1 and %d", errBadQuery, limit, MaxConnectionLimit)
	}
	match, err := connectionMatcher(s.Config, q.Services)
	if err != nil {
		return ConnectionList{}, err
	}
	table := v.a.ConnectionTable()
	if table == nil {
		return ConnectionList{}, errors.New("this agent reads no IPVS connection table")
	}
	list := ConnectionList{Schema: api.SchemaVersion, Connections: []ConnectionEntry{}}
	each := func(c spec.Connection) {
		name, ok := match(c)
		if !ok {
			return
		}
		list.Matched++
		if len(list.Connections) < limit {
			list.Connections = append(list.Connections, connectionEntry(c, name))
		}
	}
	err = table.EachConnection(ctx, each)
	if err != nil {
		return ConnectionList{}, err
	}
	list.Omitted = list.Matched - len(list.Connections)
	return list, nil
}

func connectionEntry(c spec.Connection, service string) ConnectionEntry {
	proto := c.Protocol.String()
	if c.Protocol == 0 {
		proto = "ip"
	}
	return ConnectionEntry{Protocol: proto, Client: c.Client.String(), Virtual: c.Virtual.String(), Destination: c.Dest.String(),
		State: c.State, Expires: c.Expires.Seconds(), Service: service}
}

// connectionMatcher returns what decides whether an entry belongs to the
// services patterns select (none: every entry), and the name of its
// service. An entry belongs to a service by its protocol, VIP and port; a
// persistence template by its VIP and port (0: all ports); to a
// firewall-mark service, which the entry cannot name, by its VIP and a
// destination of the service.
func connectionMatcher(cfg *agent.LoadedConfig, patterns []string) (func(spec.Connection) (string, bool), error) {
	selected, _, err := selectServices(cfg, patterns)
	if err != nil {
		return nil, err
	}
	type virtual struct {
		proto l4.Protocol
		vip   netip.AddrPort
	}
	byVirtual := map[virtual]string{}
	type marked struct {
		vip  netip.Addr
		dest netip.AddrPort
	}
	byMark := map[marked]string{}
	for _, vs := range selected {
		k := vs.ServiceKey
		if k.FWMark == 0 {
			byVirtual[virtual{k.Protocol, netip.AddrPortFrom(k.Addr, k.Port)}] = vs.Name
			byVirtual[virtual{0, netip.AddrPortFrom(k.Addr, k.Port)}] = vs.Name // its persistence templates
			byVirtual[virtual{0, netip.AddrPortFrom(k.Addr, 0)}] = vs.Name
			continue
		}
		for _, d := range vs.Destinations {
			byMark[marked{vs.VIP, netip.AddrPortFrom(d.Addr(), d.Port)}] = vs.Name
		}
	}
	return func(c spec.Connection) (string, bool) {
		if name, ok := byVirtual[virtual{c.Protocol, c.Virtual}]; ok {
			return name, true
		}
		if name, ok := byMark[marked{c.Virtual.Addr(), c.Dest}]; ok {
			return name, true
		}
		return "", len(patterns) == 0
	}, nil
}

// serveConnections answers GET /v1/connections[?service=NAME|GLOB...][&limit=N].
func (v *Views) serveConnections(w http.ResponseWriter, r *http.Request) {
	q := ConnectionQuery{Services: r.URL.Query()["service"]}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			http.Error(w, fmt.Sprintf("limit %q is not a number", l), http.StatusBadRequest)
			return
		}
		q.Limit = n
	}
	list, err := v.Connections(r.Context(), q)
	writeQueryAnswer(w, list, err)
}
