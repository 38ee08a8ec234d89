package agent

import (
	"context"
	"net/netip"
	"reflect"
	"slices"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// LoadedConfig is the whole configuration as the agent runs it: one
// consistent, validated reading of the agent file (config.Agent) and its
// services directory, with the desired state it implies.
type LoadedConfig struct {
	Agent    *config.Agent
	Services []*config.Service
	Desired  planner.Desired // every backend at its configured weight
	files    []*servicesdir.File
	pieces   planner.Pieces
	// digests are the services' configuration digests by name
	// (serviceDigests), which the cluster compares between directors.
	digests map[string]uint64
	loader  *Reloader // what read it, with its cache of the files
}

// LoadConfig reads and validates everything under the agent file at path.
// It never touches the kernel, so `lvsd check` and a reload can use it freely.
func LoadConfig(path string) (*LoadedConfig, error) {
	c, _, err := NewReloader(path).Reload(nil, nil)
	return c, err
}

// Admit finds on the host the sources a director's cluster port admits by
// default (cluster.DefaultSources): the peers' addresses and the bind
// address's subnet.
type Admit func(*config.Agent) []netip.Prefix

// LoadConfigOnHost is LoadConfig for the director that runs it: the
// cluster port's default allow set is found on the host with admit, now and
// at every reload of the agent file.
func LoadConfigOnHost(path string, admit Admit) (*LoadedConfig, error) {
	l := NewReloader(path)
	l.admit = admit
	c, _, err := l.Reload(nil, nil)
	return c, err
}

// Reloader reads the configuration for the reconciler and keeps what it
// read, so that a reload reads, parses and builds only what changed. One
// goroutine owns it.
type Reloader struct {
	path  string
	cache *servicesdir.Cache
	admit Admit // nil: the peers given as addresses stand in
}

// NewReloader returns a reloader of the agent file at path and its
// services, which has read nothing yet.
func NewReloader(path string) *Reloader {
	return &Reloader{path: path, cache: servicesdir.NewCache()}
}

// Changes says what a reload changed.
type Changes struct {
	// All: the agent file changed, so everything may have.
	All bool
	// Services are the names of the services added, removed or changed.
	Services map[string]bool
	// Fresh are the indexes in the new configuration's Services of the
	// services of the files read again, when the reload read only those
	// (nil: not known).
	Fresh []int
}

// Reload reads the configuration again: with prev nil from scratch, else
// the files in changed (paths; nil: check every file) and the rest as
// prev had them. It returns the configuration and what changed since prev,
// or what is wrong, in which case prev stays the configuration in force.
func (l *Reloader) Reload(prev *LoadedConfig, changed []string) (*LoadedConfig, Changes, error) {
	agent, all, err := l.agent(prev, changed)
	if err != nil {
		return nil, Changes{}, err
	}
	c := &LoadedConfig{Agent: agent, loader: l}
	if agent.Role != config.RoleDirector {
		return c, Changes{All: true}, nil
	}
	var paths []string // services' files changed; nil: scan them all
	if changed != nil && !all {
		paths = slices.DeleteFunc(slices.Clone(changed), func(p string) bool { return p == l.path })
		if paths == nil {
			paths = []string{}
		}
	}
	set, err := l.cache.Load(agent, paths)
	if err != nil {
		return nil, Changes{}, err
	}
	c.Services, c.files = set.Services, set.Files
	ch := Changes{All: all}
	var prevPieces planner.Pieces
	var prevDesired planner.Desired
	if !all {
		ch.Services, ch.Fresh = changedServices(prev.files, set), set.Fresh
		prevPieces, prevDesired = prev.pieces, prev.Desired
	}
	if c.Desired, c.pieces, err = planner.Rebuild(agent, c.Services, prevPieces, prevDesired, ch.Services, ch.Fresh); err != nil {
		return nil, Changes{}, err
	}
	var changedNames map[string]bool // nil: digest every service
	if !all {
		changedNames = ch.Services
	}
	c.digests = serviceDigests(prev, c, changedNames)
	return c, ch, nil
}

// agent reads the agent file when it may have changed, and reports
// whether it did (or there is no previous configuration).
func (l *Reloader) agent(prev *LoadedConfig, changed []string) (*config.Agent, bool, error) {
	if prev != nil && changed != nil && !slices.Contains(changed, l.path) {
		return prev.Agent, false, nil
	}
	a, err := config.LoadAgent(l.path)
	if err != nil {
		return nil, false, err
	}
	if c := a.Cluster; c != nil && c.AllowFrom == nil && l.admit != nil {
		c.Admitted = l.admit(a)
	}
	if prev != nil && reflect.DeepEqual(a, prev.Agent) {
		return prev.Agent, false, nil
	}
	return a, true, nil
}

// changedServices names the services of every file that is not the same
// reading in old and set (both sorted by path): what they held before and
// what they hold now. A set that says which files it replaced and which
// services it read again (a patch) tells at once; else the lists are
// compared.
func changedServices(old []*servicesdir.File, set servicesdir.Set) map[string]bool {
	out := map[string]bool{}
	if set.Replaced != nil && set.Fresh != nil {
		for _, f := range set.Replaced {
			for _, s := range f.Services {
				out[s.Name] = true
			}
		}
		for _, i := range set.Fresh {
			out[set.Services[i].Name] = true
		}
		return out
	}
	add := func(f *servicesdir.File) {
		for _, s := range f.Services {
			out[s.Name] = true
		}
	}
	new := set.Files
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case i < len(old) && j < len(new) && old[i] == new[j]:
			// The same reading, told by its pointer: no look at its path
			// (10,000 files scattered in memory).
			i++
			j++
		case j == len(new) || i < len(old) && old[i].Path < new[j].Path:
			add(old[i])
			i++
		case i == len(old) || new[j].Path < old[i].Path:
			add(new[j])
			j++
		default:
			if old[i] != new[j] {
				add(old[i])
				add(new[j])
			}
			i++
			j++
		}
	}
	return out
}

// PlanFor returns what a pass with cfg would change on this host now,
// without changing anything (`lvsd plan`): the data plane, then the
// addresses of the VIPs held (held says which; nil: all). It assumes every
// backend healthy (only the running agent knows health) but takes the
// operator's overrides in (`lvsd backend`); destinations already at weight
// 0 that are still draining are shown as staying.
func PlanFor(ctx context.Context, cfg *LoadedConfig, k Kernel, held func(netip.Addr) bool) ([]planner.Op, error) {
	owned, err := LoadOwnedServices(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	overrides, err := LoadOverrides(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	addrs, err := LoadOwnedAddresses(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	return planWith(ctx, cfg, k, owned, overrides, addrs, held)
}

// planWith is PlanFor with the state directory's records given: the
// services and addresses lvsd owns and the operator's overrides.
func planWith(ctx context.Context, cfg *LoadedConfig, k Kernel, owned planner.Ownership, overrides planner.Overrides,
	addrs planner.Ownership, held func(netip.Addr) bool) ([]planner.Op, error) {
	overrides, _ = overrides.Pruned(cfg.Services)
	desired, _ := planner.WithHealth(cfg.Desired, cfg.Services, nil, overrides)
	actual, err := k.ReadActual(ctx, desired)
	if err != nil {
		return nil, err
	}
	ops, _ := planner.Plan(planner.PlanInput{Desired: desired, Actual: actual, Owned: owned, Drains: planner.Drains{}, DrainTimeout: 1 << 62})
	present, err := listPresent(ctx, k, desired)
	if err != nil {
		return nil, err
	}
	hold := map[netip.Addr]bool{}
	for _, v := range desired.VIPs {
		hold[v.VIP] = held == nil || held(v.VIP)
	}
	p := Programmed{Desired: desired, InUse: planner.AddressesInUse(desired, actual, ops), Eligible: planner.EligibleVIPs(desired)}
	return append(ops, planner.PlanAddresses(addressInput(k, p, present, addrs, hold))...), nil
}
