package agent

import (
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
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

// servicesAt returns the services of c at the indexes given whose names
// are in names.
func (c *LoadedConfig) servicesAt(indexes []int, names map[string]bool) []*config.Service {
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
func (c *LoadedConfig) named(names map[string]bool) []*config.Service {
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
		if src := c.pieces.Source(name); src != nil {
			out = append(out, src)
		}
	}
	return out
}

// service returns the configured service named name (nil: none).
func (c *LoadedConfig) service(name string) *config.Service {
	if c.pieces != nil {
		return c.pieces.Source(name)
	}
	for _, s := range c.Services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// serviceKeys returns the keys of the IPVS services of the named
// configured services: from their pieces, without a walk over every
// service, when c has them.
func (c *LoadedConfig) serviceKeys(names map[string]bool) []ipvs.ServiceKey {
	if c.pieces == nil {
		return planner.ServicesOf(c.Desired, names)
	}
	return c.pieces.Keys(names)
}
