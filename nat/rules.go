package nat

import "github.com/lvsd/lvsd/nat/rules"

// The ruleset's values live in package rules, which links no kernel
// library; these names keep nat's callers as they were.

type (
	Spec           = rules.Spec
	MSSClamp       = rules.MSSClamp
	Match          = rules.Match
	MarkRule       = rules.MarkRule
	SNATRule       = rules.SNATRule
	Ruleset        = rules.Ruleset
	ConntrackEntry = rules.ConntrackEntry
)

const (
	TableName = rules.TableName

	SysctlForwardV4     = rules.SysctlForwardV4
	SysctlForwardV6     = rules.SysctlForwardV6
	SysctlIPVSConntrack = rules.SysctlIPVSConntrack
	SysctlTCPBeLiberal  = rules.SysctlTCPBeLiberal
)

// Render is rules.Render.
func Render(spec Spec) (Ruleset, error) { return rules.Render(spec) }

// ForwardingSysctls is rules.ForwardingSysctls.
func ForwardingSysctls(v4, v6 bool, iface string) map[string]string {
	return rules.ForwardingSysctls(v4, v6, iface)
}

// FullNATSysctls is rules.FullNATSysctls.
func FullNATSysctls() map[string]string { return rules.FullNATSysctls() }
