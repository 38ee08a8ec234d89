package config

import (
	"fmt"
	"net/netip"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// Track is the director's upstream check (docs/operations.md, "Tracking"):
// checks like a backend's, run against the director's gateway or another
// upstream it needs. While they fail the director gives its VIPs up (or,
// under ECMP, withdraws its routes), as when its interface is down.
type Track struct {
	Address netip.Addr // what the checks probe; invalid when every check is exec
	Health  *Health
}

type rawTrack struct {
	Address  string       `yaml:"address"`
	Checks   []rawCheck   `yaml:"checks"`
	AtLeast  int          `yaml:"at_least" range:"0-100"`
	Interval yamldoc.Text `yaml:"interval"`
	Timeout  yamldoc.Text `yaml:"timeout"`
	Rise     *int         `yaml:"rise" range:"1-100"`
	Fall     *int         `yaml:"fall" range:"1-100"`
}

// track validates the track block: the checks of a health block, an
// address for those that probe one, and a port for those that need one
// (an upstream has no service port to default to).
func (d *doc) track(role Role, raw *rawTrack) *Track {
	if raw == nil {
		return nil
	}
	if role != RoleDirector {
		d.Errorf("$.track", "track is for role director: a real server holds no VIP to give up")
		return nil
	}
	h := d.health("$.track", "track", &rawHealth{Checks: raw.Checks, AtLeast: raw.AtLeast, Interval: raw.Interval,
		Timeout: raw.Timeout, Rise: raw.Rise, Fall: raw.Fall}, nil)
	t := &Track{Health: h}
	probes := false
	for i, c := range h.Checks {
		if c.Type == "exec" {
			continue
		}
		probes = true
		if c.Port == 0 && c.Type != "icmp" {
			d.Errorf(fmt.Sprintf("$.track.checks[%d]", i), "track: a %s check needs a port (an upstream has no service port to default to)", c.Type)
		}
	}
	switch a, err := netip.ParseAddr(raw.Address); {
	case raw.Address == "" && probes:
		d.Errorf("$.track", "track: address is required for its %s checks (the gateway or upstream they probe)", firstProbe(h.Checks))
	case raw.Address == "":
	case err != nil || a.Zone() != "":
		d.Errorf("$.track.address", "track: address %q is not an IP address", raw.Address)
	case !probes && len(h.Checks) > 0:
		d.Errorf("$.track.address", "track: address is probed by no check (every check is exec)")
	default:
		t.Address = a.Unmap()
	}
	return t
}

func firstProbe(cs []Check) string {
	for _, c := range cs {
		if c.Type != "exec" {
			return c.Type
		}
	}
	return ""
}
