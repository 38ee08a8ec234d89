// Package nat owns lvsd's nftables state: the firewall marks that steer
// packets into IPVS fwmark services, and the source NAT behind FULLNAT.
//
// lvsd owns exactly two tables, "table ip lvsd" and "table ip6 lvsd", and
// never reads or writes anything else. Every change replaces both tables in
// one netlink batch, which the kernel applies as one transaction: packets see
// either the old rules or the new ones, never a mix, and a failed batch
// changes nothing.
//
// The package has three layers; the first two are values, in package
// nat/rules (which links no kernel library, for the planner and the
// configuration), and named here too:
//
//   - Spec is what the agent wants, in lvsd's words (VIP, protocol, ports,
//     client source prefixes, mark; SNAT addresses for FULLNAT). Render checks
//     it and turns it into a Ruleset without touching the system, so rendering
//     is covered by golden files (rules/testdata/*.golden, `go test -update`).
//   - Ruleset is the complete content of both tables. Its String method prints
//     exactly what `nft list table ip lvsd; nft list table ip6 lvsd` shows
//     once the ruleset is applied, so `lvsd plan` can show operators the rules
//     in the syntax they already read.
//   - Interface applies a Ruleset. Kernel does it with github.com/google/nftables;
//     Fake keeps it in memory for agent tests.
//
// # Rules
//
// In each table the prerouting chain (filter hook, priority mangle, so before
// IPVS, which sits in LOCAL_IN) first lets everything that is not addressed
// to a VIP pass ("ip daddr != @vips accept") and, with FULLNAT services,
// jumps to the fullnat chain. Mark rules follow, ordered most specific
// first, each ending in "accept": the first match wins.
// Specific means, in this order (the forwarding-rule selection of seed 001):
// a named protocol beats "any protocol", a longer client source prefix beats
// a shorter one and both beat a rule without sources, listed ports beat "all
// ports". A packet from a client outside every source prefix therefore gets
// the rule without sources, or no mark at all (and reaches a non-fwmark IPVS
// service, if there is one).
//
// FULLNAT is IPVS in NAT (masquerade) mode with net.ipv4.vs.conntrack=1, so
// that IPVS connections are conntrack entries, plus source NAT by nftables:
// the "fullnat" chain (jumped to from prerouting, first match wins, same
// order as the marks) stores a per-service connection mark, and the
// postrouting chain (nat hook, priority srcnat) translates the source of
// connections carrying that mark to the service's SNAT addresses. Matching
// the connection's original destination in postrouting ("ct original daddr")
// would save the mark, but nft 1.0.6 crashes listing such rules. The SNAT
// range is "persistent": the address depends on the client address alone,
// which another director can compute (conntrack_hash.go) when it takes the
// VIP over and restores the conntrack entries of the synced IPVS
// connections (conntrack.go), so the real servers keep seeing the same
// 4-tuple. An input chain drops new or invalid tcp/udp/sctp packets to the
// SNAT addresses: they take only replies, and a reply without its conntrack
// entry must not reach the local stack, which would reset the connection.
//
// Chains are only created when they have rules: an unused nat chain would
// make the kernel track every connection of that family for nothing. The
// tables themselves always exist (an empty Spec leaves two tables holding
// only their empty vips set): the set's comment carries the ruleset's
// digest, which lets Apply skip writing a ruleset the kernel already has.
//
// # Tests
//
// `go test ./nat/rules/` renders the golden files without privileges.
// `go test ./nat/` as root applies the same cases to throw-away network
// namespaces: `nft list` must print exactly Ruleset.String(), foreign
// tables must survive, and real packets must be marked and source-NATed
// (no IPVS needed). Root without nftables fails
// rather than skips. The IPVS tier runs in a VM with a stock kernel:
//
//	go test -tags vmtest -count=1 -v -exec "$PWD/e2e/vm/run --" -run VM ./nat/
package nat
