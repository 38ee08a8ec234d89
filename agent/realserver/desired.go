package realserver

import (
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
)

// VIPSource yields the VIPs a real server must hold. Today that is the
// configuration's static list (StaticVIPs); the director cluster can supply
// them later through another source without touching
// planner.BuildRealServer or planner.PlanRealServer.
type VIPSource func(*config.Agent) []netip.Addr

// StaticVIPs returns realserver.vips of the agent file.
func StaticVIPs(a *config.Agent) []netip.Addr { return a.RealServer.VIPs }
