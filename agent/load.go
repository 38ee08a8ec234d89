package agent

import (
	"context"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
)

// Config is one consistent, validated reading of the agent file and its
// services directory, with the desired state it implies.
type Config struct {
	Agent    *config.Agent
	Services []config.Service
	Desired  Desired
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

// PlanFor returns what reconciling cfg would change in the kernel now,
// without changing anything (`lvsd plan`), assuming every backend healthy
// (only the running agent knows health). Destinations already at weight 0
// that are still draining are shown as staying.
func PlanFor(ctx context.Context, cfg *Config, k Kernel) ([]Op, error) {
	owned, err := LoadOwnership(cfg.Agent.StateDir)
	if err != nil {
		return nil, err
	}
	actual, err := k.ReadActual(ctx, cfg.Desired.Interface)
	if err != nil {
		return nil, err
	}
	notYet := func(ipvs.ServiceKey, ipvs.Destination) bool { return false }
	desired, _ := ApplyHealth(cfg.Desired, cfg.Services, nil)
	return Plan(desired, actual, owned, notYet), nil
}
