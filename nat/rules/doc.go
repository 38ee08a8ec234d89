// Package rules is lvsd's nftables ruleset as a value: the Spec of what the
// agent wants (fwmark rules, FULLNAT source NAT, the guards around them),
// Render, which turns it into the Ruleset of lvsd's two tables, and that
// Ruleset's text (exactly what nft lists) and digest. It also names the
// kernel parameters NAT needs and works out the conntrack entry a FULLNAT
// connection gets. It touches nothing: package nat writes a Ruleset to the
// kernel, so that planning and configuration use these values without
// linking nftables or netlink.
//
// Rendering is covered by golden files (testdata/*.golden, `go test -update`);
// nat's tests apply the same cases (nat/internal/golden) to a network
// namespace and compare what nft lists with them.
package rules
