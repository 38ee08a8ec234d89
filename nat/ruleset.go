package nat

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// TableName is the name of lvsd's table in both the ip and ip6 families.
const TableName = "lvsd"

// Names of the objects inside each table.
const (
	vipSet         = "vips"
	chainPre       = "prerouting"
	chainFullNAT   = "fullnat"
	chainPost      = "postrouting"
	chainInput     = "input"
	chainOutput    = "output"
	commentPrefix  = "managed by lvsd, ruleset "
	digestHexChars = 32 // 128 bits of sha256: plenty to tell rulesets apart
)

// Ruleset is the complete content of lvsd's two tables, made by Render. It
// is immutable; the zero Ruleset is not valid (Render(Spec{}) is the empty
// one).
type Ruleset struct {
	tables []table // ipv4, ipv6
	digest string
}

// table is the content of one owned table.
type table struct {
	fam  family
	vips []netip.Addr // every VIP of the family, sorted: the early-exit set
	// Chains, each nil when empty (and then not created).
	pre, fullnat, post, input, output []rule
}

// verdict ends a rule.
type verdict uint8

const (
	noVerdict verdict = iota
	accept
	ret
	jumpFullNAT
	drop
)

// Connection states of a "ct state" match (NF_CT_STATE_*_BIT), in the
// order nft prints them.
const (
	ctStateInvalid     = 1
	ctStateEstablished = 2
	ctStateRelated     = 4
	ctStateNew         = 8
	ctStateUntracked   = 64
)

// rule is one nftables rule. Matches and statements appear in nft listings
// in the order of the fields below, which is also the order of the
// expressions Kernel sends.
type rule struct {
	oif      string      // "oifname X", if not empty
	notVIP   bool        // "ip daddr != @vips"
	daddr    netip.Addr  // destination (a VIP), if valid
	daddrs   []addrRange // destination ranges (SNAT addresses), if any
	saddr    []addrRange
	proto    Protocol   // AnyProtocol: no protocol match
	protos   []Protocol // "meta l4proto { ... }", sorted; instead of proto
	ports    []PortRange
	ctMark   uint32 // "ct mark X" match, if non-zero
	ctState  uint32 // "ct state X,Y" match (ctState* bits), if non-zero
	notRoot  bool   // "meta skuid != 0": sent by a socket of another user than root
	redirect bool   // "icmpv6 type nd-redirect"
	synAck   bool   // "tcp flags syn,ack / fin,syn,rst,ack": a SYN-ACK
	mssAbove uint16 // "tcp option maxseg size > N", if non-zero

	setMSS    uint16    // "tcp option maxseg size set N", if non-zero
	setMark   uint32    // "meta mark set X", if non-zero
	setCtMark uint32    // "ct mark set X", if non-zero
	snat      addrRange // "snat to A[-B] persistent", if from is valid

	verdict verdict
	comment string
}

// Digest identifies the ruleset: equal digests mean equal tables. Kernel
// stores it in the tables so that Apply can skip an unchanged ruleset.
func (rs Ruleset) Digest() string { return rs.digest }

// Empty reports whether the ruleset has no rules (its tables are empty).
func (rs Ruleset) Empty() bool {
	for _, t := range rs.tables {
		if len(t.pre)+len(t.fullnat)+len(t.post)+len(t.input)+len(t.output) > 0 {
			return false
		}
	}
	return true
}

// String returns both tables in nft syntax, exactly as nft 1.0.6 lists them
// once applied ("nft list table ip lvsd; nft list table ip6 lvsd").
func (rs Ruleset) String() string {
	return rs.format(rs.digest)
}

func (rs Ruleset) format(digest string) string {
	var b strings.Builder
	for _, t := range rs.tables {
		t.format(&b, commentPrefix+digest)
	}
	return b.String()
}

// seal computes the digest over the text with an empty digest in it.
func (rs *Ruleset) seal() {
	sum := sha256.Sum256([]byte(rs.format("")))
	rs.digest = hex.EncodeToString(sum[:])[:digestHexChars]
}

func (t table) format(b *strings.Builder, comment string) {
	fmt.Fprintf(b, "table %s %s {\n", t.fam.nftName(), TableName)
	fmt.Fprintf(b, "\tset %s {\n\t\ttype %s\n\t\tcomment \"%s\"\n", vipSet, addrType(t.fam), comment)
	if len(t.vips) > 0 {
		b.WriteString("\t\telements = { ")
		// nft 1.0.6 breaks named-set element lists after every second IPv4
		// address and after every IPv6 address (calculate_delim).
		per := 2
		if t.fam == ipv6 {
			per = 1
		}
		for i, a := range t.vips {
			if i > 0 {
				if i%per == 0 {
					b.WriteString(",\n\t\t\t     ")
				} else {
					b.WriteString(", ")
				}
			}
			b.WriteString(a.String())
		}
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n")
	chain := func(name, hook string, rules []rule) {
		if rules == nil {
			return
		}
		fmt.Fprintf(b, "\n\tchain %s {\n", name)
		if hook != "" {
			fmt.Fprintf(b, "\t\t%s\n", hook)
		}
		for _, r := range rules {
			fmt.Fprintf(b, "\t\t%s\n", r.format(t.fam))
		}
		b.WriteString("\t}\n")
	}
	chain(chainPre, "type filter hook prerouting priority mangle; policy accept;", t.pre)
	chain(chainFullNAT, "", t.fullnat)
	chain(chainPost, "type nat hook postrouting priority srcnat; policy accept;", t.post)
	chain(chainInput, "type filter hook input priority filter; policy accept;", t.input)
	chain(chainOutput, "type filter hook output priority filter; policy accept;", t.output)
	b.WriteString("}\n")
}

func addrType(f family) string {
	if f == ipv4 {
		return "ipv4_addr"
	}
	return "ipv6_addr"
}

// format prints the rule as nft lists it.
func (r rule) format(f family) string {
	var w []string
	add := func(format string, a ...any) { w = append(w, fmt.Sprintf(format, a...)) }
	ip := f.nftName()
	if r.oif != "" {
		add("oifname \"%s\"", r.oif)
	}
	if r.notVIP {
		add("%s daddr != @%s", ip, vipSet)
	}
	if r.daddr.IsValid() {
		add("%s daddr %s", ip, r.daddr)
	}
	if len(r.daddrs) > 0 {
		add("%s daddr %s", ip, list(r.daddrs))
	}
	if len(r.saddr) > 0 {
		add("%s saddr %s", ip, list(r.saddr))
	}
	if len(r.protos) > 0 {
		add("meta l4proto %s", list(r.protos))
	}
	switch {
	case len(r.ports) > 0:
		// nft hides the "meta l4proto" dependency of a port match.
		add("%s dport %s", r.proto, list(r.ports))
	case r.proto != AnyProtocol:
		add("meta l4proto %s", r.proto)
	}
	if r.synAck {
		// nft hides the "meta l4proto tcp" dependency here too.
		add("tcp flags syn,ack / fin,syn,rst,ack")
	}
	if r.mssAbove != 0 {
		add("tcp option maxseg size > %d", r.mssAbove)
	}
	if r.ctMark != 0 {
		add("ct mark 0x%08x", r.ctMark)
	}
	if r.ctState != 0 {
		add("ct state %s", ctStateNames(r.ctState))
	}
	if r.redirect {
		add("icmpv6 type nd-redirect")
	}
	if r.notRoot {
		add("meta skuid != 0")
	}
	if r.setMSS != 0 {
		add("tcp option maxseg size set %d", r.setMSS)
	}
	if r.setMark != 0 {
		add("meta mark set 0x%08x", r.setMark)
	}
	if r.setCtMark != 0 {
		add("ct mark set 0x%08x", r.setCtMark)
	}
	if r.snat.from.IsValid() {
		// nft prints an aligned range as a prefix. Persistent: the
		// address depends on the client alone (conntrack_hash.go).
		add("snat to %s persistent", r.snat)
	}
	switch r.verdict {
	case accept:
		add("accept")
	case ret:
		add("return")
	case jumpFullNAT:
		add("jump %s", chainFullNAT)
	case drop:
		add("drop")
	}
	if r.comment != "" {
		add("comment \"%s\"", r.comment) // checkComment keeps quotes out
	}
	return strings.Join(w, " ")
}

// ctStateNames prints a ct state bit set as nft does: "invalid,new".
func ctStateNames(bits uint32) string {
	var names []string
	for _, s := range []struct {
		bit  uint32
		name string
	}{{ctStateInvalid, "invalid"}, {ctStateEstablished, "established"}, {ctStateRelated, "related"},
		{ctStateNew, "new"}, {ctStateUntracked, "untracked"}} {
		if bits&s.bit != 0 {
			names = append(names, s.name)
		}
	}
	return strings.Join(names, ",")
}

// list prints one element bare and several as an anonymous set.
func list[T fmt.Stringer](xs []T) string {
	if len(xs) == 1 {
		return xs[0].String()
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return "{ " + strings.Join(s, ", ") + " }"
}
