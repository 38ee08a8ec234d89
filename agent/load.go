package agent

import (
	"context"
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
)

// Config is one consistent, validated reading of the agent file and its
// services directory, with the desired state it implies.
type Config struct {
	Agent    *config.Agent
	Services []config.Service
	Desired  Desired // every backend at its configured weight
}

// LoadConfig reads and validates everything under the agent file at path.
// It never touches the kernel, so `lvsd check` and a reload can use it freely.
func LoadConfig(path string) (*Config, error) {
	a, err := config.LoadAgent(path)
	if err != nil {
		return nil, err
	}
	c := &Config{Agent: a}
	if a.Role != config.RoleDirector {
		return c, nil
	}
	if c.Services, err = a.LoadServices(); err != nil {
		return nil, err
	}
	if c.Desired, err = Build(a, c.Services); err != nil {
		return nil, err
	}
	return c, nil
}

// PlanFor returns what a pass with cfg would change on this host now,
// without changing anything (`lvsd plan`): the data plane, then the
// addresses of the VIPs held (held says which; nil: all). It assumes every
// backend healthy (only the running agent knows health); destinations
// already at weight 0 that are still draining are shown as staying.
func PlanFor(ctx context.Context, cfg *Config, k Kernel, held func(netip.Addr) bool) ([]Op, error) {
	owned, err := LoadOwnedServices(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	desired, _ := WithHealth(cfg.Desired, cfg.Services, nil)
	actual, err := k.ReadActual(ctx, desired)
	if err != nil {
		return nil, err
	}
	ops, _ := Plan(PlanInput{Desired: desired, Actual: actual, Owned: owned, Drains: Drains{}, DrainTimeout: 1 << 62})
	addrs, err := LoadOwnedAddresses(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	present, err := listPresent(ctx, k, desired)
	if err != nil {
		return nil, err
	}
	hold := map[netip.Addr]bool{}
	for _, v := range desired.VIPs {
		hold[v.VIP] = held == nil || held(v.VIP)
	}
	p := Programmed{Desired: desired, InUse: AddressesInUse(desired, actual, ops), Eligible: EligibleVIPs(desired)}
	return append(ops, PlanAddresses(addressInput(k, p, present, addrs, hold))...), nil
}
