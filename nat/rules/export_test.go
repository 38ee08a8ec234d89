package rules

import (
	"net/netip"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The unexported helpers the external tests check directly.
var (
	MergePorts    = mergePorts
	ComparePorts  = comparePorts
	MergePrefixes = mergePrefixes
	MergeRanges   = mergeRanges
	SubtractAddrs = subtractAddrs
	FamilyOf      = familyOf
)

const DigestHexChars = digestHexChars

// FullNATScan is FullNATEntry without the index: the linear scan over the
// rules that the index must agree with.
func (rs Ruleset) FullNATScan() func(proto l4.Protocol, client, vip, backend netip.AddrPort) (ConntrackEntry, bool) {
	return rs.fullnatScan
}

// FullNATIndexBuild builds the index again, for its benchmark.
func (rs Ruleset) FullNATIndexBuild() { newFullNATIndex(rs.tables) }

// RulesetOf makes a Ruleset of any tables, as Render would hold them, for
// tests of what Render never writes.
func RulesetOf(tables []Table) Ruleset {
	return Ruleset{tables: tables, fullnat: newFullNATIndex(tables)}
}
