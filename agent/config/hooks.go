package config

import (
	"time"

	"github.com/lvsd/lvsd/agent/hooks"
	"github.com/lvsd/lvsd/agent/program"
)

// Hooks are the operator's event hooks (docs/operations.md, "Event
// hooks"): programs run when this director takes or releases a VIP and
// when a backend's health changes.
type Hooks struct {
	OnOwnership string // absolute path; "" = none
	OnHealth    string
	Timeout     time.Duration
}

type rawHooks struct {
	OnOwnership string `yaml:"on_ownership"`
	OnHealth    string `yaml:"on_health"`
	Timeout     string `yaml:"timeout"`
}

// hooks validates the hooks block: programs lvsd (root) may run, a timeout
// in range. Only a director reports these events.
func (d *doc) hooks(role Role, raw *rawHooks) *Hooks {
	if raw == nil {
		return nil
	}
	if role != RoleDirector {
		d.Errorf("$.hooks", "hooks are for role director; a real server reports no ownership or health events")
		return nil
	}
	h := &Hooks{
		OnOwnership: d.hookProgram("on_ownership", raw.OnOwnership),
		OnHealth:    d.hookProgram("on_health", raw.OnHealth),
		Timeout:     d.durationIn("$.hooks.timeout", "hooks timeout", raw.Timeout, hooks.DefaultTimeout, hooks.MinTimeout, hooks.MaxTimeout),
	}
	if raw.OnOwnership == "" && raw.OnHealth == "" {
		d.Errorf("$.hooks", "a hooks block names no program: give on_ownership or on_health (absolute paths), or leave the block out")
	}
	return h
}

// hookProgram checks the program of one hook key ("" when absent).
func (d *doc) hookProgram(key, path string) string {
	if path == "" {
		return ""
	}
	if err := program.Check(path, !d.laxModes); err != nil {
		d.Errorf("$.hooks."+key, "%s: %v", key, err)
		return ""
	}
	return path
}
