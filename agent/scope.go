package agent

import (
	"sort"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
)

// scope is what the next pass reads back and plans. Passes cost what they
// look at, so each trigger adds only what it may have changed: a reload
// the services of the files that changed, a health change the services of
// the backends that changed, a drain its service, the audit its share of
// the table (docs/architecture.md, "Incremental passes").
type scope struct {
	// all: read every service lvsd wants or owns back and plan them all
	// (the first pass, and after the agent file changed).
	all bool
	// keys are the IPVS services to read back (the service and its
	// destinations) and plan.
	keys map[ipvs.ServiceKey]bool
	// table: dump the whole service table (one request) and plan every
	// service found missing, changed or new there.
	table bool
	// globals: read back and plan the sysctls, the sync daemons and the
	// nftables tables.
	globals bool
	// holder: hand the VIP holder the programmed state even if it did not
	// change, so it reads its addresses back.
	holder bool
}

func (s *scope) add(keys ...ipvs.ServiceKey) {
	if s.keys == nil {
		s.keys = map[ipvs.ServiceKey]bool{}
	}
	for _, k := range keys {
		s.keys[k] = true
	}
}

// merge adds o to s.
func (s *scope) merge(o scope) {
	s.all = s.all || o.all
	s.table = s.table || o.table
	s.globals = s.globals || o.globals
	s.holder = s.holder || o.holder
	for k := range o.keys {
		s.add(k)
	}
}

func (s scope) empty() bool {
	return !s.all && !s.table && !s.globals && !s.holder && len(s.keys) == 0
}

// servicesOf returns the keys of the IPVS services of the named
// configured services in d (sorted by key).
func servicesOf(d Desired, names map[string]bool) []ipvs.ServiceKey {
	var out []ipvs.ServiceKey
	if len(names) == 0 {
		return nil
	}
	named := config.NamesOf(names)
	for _, vs := range d.Services {
		if named.Has(vs.Name) && !vs.Internal {
			out = append(out, vs.ServiceKey)
		}
	}
	return out
}

// servicesAt returns the services of c at the indexes given whose names
// are in names.
func (c *Config) servicesAt(indexes []int, names map[string]bool) []*config.Service {
	var out []*config.Service
	for _, i := range indexes {
		if names[c.Services[i].Name] {
			out = append(out, c.Services[i])
		}
	}
	return out
}

// named returns the configured services whose names are in names, in no
// particular order: from their pieces, without a walk over every service,
// when c has them.
func (c *Config) named(names map[string]bool) []*config.Service {
	var out []*config.Service
	if c.pieces == nil {
		has := config.NamesOf(names)
		for _, s := range c.Services {
			if has.Has(s.Name) {
				out = append(out, s)
			}
		}
		return out
	}
	for name := range names {
		if p := c.pieces.get(name); p != nil {
			out = append(out, p.src)
		}
	}
	return out
}

// serviceKeys returns the keys of the IPVS services of the named
// configured services: from their pieces, without a walk over every
// service, when c has them.
func (c *Config) serviceKeys(names map[string]bool) []ipvs.ServiceKey {
	if c.pieces == nil {
		return servicesOf(c.Desired, names)
	}
	return c.pieces.keys(names)
}

// findService returns the service of d with key k (d.Services is sorted).
func findService(d Desired, k ipvs.ServiceKey) (*VirtualService, bool) {
	if i, ok := d.serviceIndex(k); ok {
		return d.Services[i], true
	}
	return nil, false
}

// wants reports whether d has an IPVS service with key k.
func (d Desired) wants(k ipvs.ServiceKey) bool {
	_, ok := d.serviceIndex(k)
	return ok
}

// serviceIndex is the index of k in d.Services, found by binary search on
// the index: slices.BinarySearchFunc hands its function each probed
// VirtualService by value (~200 bytes copied per step).
func (d Desired) serviceIndex(k ipvs.ServiceKey) (int, bool) {
	i := sort.Search(len(d.Services), func(i int) bool { return d.Services[i].ServiceKey.Compare(k) >= 0 })
	return i, i < len(d.Services) && d.Services[i].ServiceKey.Compare(k) == 0
}
