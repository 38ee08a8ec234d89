package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// TableName is the name of lvsd's table in both the ip and ip6 families.
const TableName = "lvsd"

// Names of the objects inside each table, and the start of the vips set's
// comment, which carries the ruleset's digest.
const (
	VIPSet           = "vips"
	ChainPrerouting  = "prerouting"
	ChainFullNAT     = "fullnat"
	ChainPostrouting = "postrouting"
	ChainInput       = "input"
	ChainOutput      = "output"
	CommentPrefix    = "managed by lvsd, ruleset "
	digestHexChars   = 32 // 128 bits of sha256: plenty to tell rulesets apart
)

// Ruleset is the complete content of lvsd's two tables, made by Render. It
// is immutable; the zero Ruleset is not valid (Render(Spec{}) is the empty
// one).
type Ruleset struct {
	tables []Table // ipv4, ipv6
	digest string
	// fullnat finds a connection's fullnat rule for FullNATEntry. Render
	// builds it from the tables: equal tables give equal indexes, so
	// Rulesets stay comparable with reflect.DeepEqual.
	fullnat *fullnatIndex
}

// Tables returns the content of the two tables, IPv4 first, for the code
// that writes them to the kernel; nil for the zero Ruleset. The caller must
// not modify them: a Ruleset is shared and its digest would no longer match.
func (rs Ruleset) Tables() []Table { return rs.tables }

// Table is the content of one owned table.
type Table struct {
	Family Family
	VIPs   []netip.Addr // every VIP of the family, sorted: the early-exit set
	// Meters are dynamic sets the rules update (per-source rates).
	Meters []Meter
	// Chains, each nil when empty (and then not created).
	Pre, FullNAT, Post, Input, Output []Rule
	// The FULLNAT maps (fullnatmap.go), each created only when it has
	// elements: fullnat_ports, fullnat_ranges, fullnat_any and
	// snat_marks, and the
	// chains snat_0, snat_1 ... that snat_marks jumps to, one per range.
	PortMarks  []PortMark // single ports
	RangeMarks []PortMark
	VIPMarks   []VIPMark
	SNATMarks  []SNATMark
	SNATChains []AddrRange
}

// Verdict ends a rule.
type Verdict uint8

// Verdicts: NoVerdict lets the packet go on to the next rule.
const (
	NoVerdict Verdict = iota
	Accept
	Return
	JumpFullNAT
	Drop
)

// Connection states of a "ct state" match (NF_CT_STATE_*_BIT), in the
// order nft prints them.
const (
	CtStateInvalid     = 1
	CtStateEstablished = 2
	CtStateRelated     = 4
	CtStateNew         = 8
	CtStateUntracked   = 64
)

// Rule is one nftables rule. Matches and statements appear in nft listings
// in the order of the fields below, which is also the order of the
// expressions nat.Kernel sends.
type Rule struct {
	OIF      string      // "oifname X", if not empty
	NotIIF   string      // "iifname != X", if not empty
	NotVIP   bool        // "ip daddr != @vips"
	DAddr    netip.Addr  // destination (a VIP), if valid
	DAddrs   []AddrRange // destination ranges (SNAT addresses), if any
	SAddr    []AddrRange
	Proto    l4.Protocol   // l4.Any: no protocol match
	Protos   []l4.Protocol // "meta l4proto { ... }", sorted; instead of Proto
	Ports    []l4.PortRange
	THDport  uint16      // "th dport N" (after Protos), if non-zero
	NotSAddr []AddrRange // "ip saddr != ...", if any
	CtMark   uint32      // "ct mark X" match, if non-zero
	CtState  uint32      // "ct state X,Y" match (CtState* bits), if non-zero
	NotRoot  bool        // "meta skuid != 0": sent by a socket of another user than root
	Redirect bool        // "icmpv6 type nd-redirect"
	SynAck   bool        // "tcp flags syn,ack / fin,syn,rst,ack": a SYN-ACK
	MSSAbove uint16      // "tcp option maxseg size > N", if non-zero

	SetMSS    uint16 // "tcp option maxseg size set N", if non-zero
	SetMark   uint32 // "meta mark set X", if non-zero
	SetCtMark uint32 // "ct mark set X", if non-zero
	// SetCtMarkMap: "ct mark set <key> map @<map>", if not NoMarkMap.
	SetCtMarkMap MarkMap
	// CtMarkVmap: "ct mark vmap @snat_marks".
	CtMarkVmap bool
	SNAT       AddrRange // "snat to A[-B] persistent", if From is valid
	// Meter names a Meter of the table: "update @M { ip saddr limit rate
	// over MeterRate/second burst MeterBurst packets }", if not empty.
	Meter      string
	MeterRate  uint32
	MeterBurst uint32

	Verdict Verdict
	Comment string
}

// Digest identifies the ruleset: equal digests mean equal tables. nat.Kernel
// stores it in the tables so that Apply can skip an unchanged ruleset.
func (rs Ruleset) Digest() string { return rs.digest }

// Empty reports whether the ruleset has no rules (its tables are empty).
func (rs Ruleset) Empty() bool {
	for _, t := range rs.tables {
		if len(t.Pre)+len(t.FullNAT)+len(t.Post)+len(t.Input)+len(t.Output)+len(t.Meters)+len(t.SNATChains) > 0 {
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
		t.format(&b, CommentPrefix+digest)
	}
	return b.String()
}

// seal computes the digest over the text with an empty digest in it.
func (rs *Ruleset) seal() {
	sum := sha256.Sum256([]byte(rs.format("")))
	rs.digest = hex.EncodeToString(sum[:])[:digestHexChars]
}

func (t Table) format(b *strings.Builder, comment string) {
	fmt.Fprintf(b, "table %s %s {\n", t.Family.NFTName(), TableName)
	fmt.Fprintf(b, "\tset %s {\n\t\ttype %s\n\t\tcomment \"%s\"\n", VIPSet, addrType(t.Family), comment)
	// nft 1.0.6 breaks named-set element lists after every second IPv4
	// address, every fifth mark and every other key (calculate_delim).
	addrsPerLine := 2
	if t.Family == IPv6 {
		addrsPerLine = 1
	}
	elements(b, addrsPerLine, t.VIPs, netip.Addr.String)
	b.WriteString("\t}\n")
	for _, m := range t.Meters {
		fmt.Fprintf(b, "\n\tset %s {\n\t\ttype %s\n\t\tsize %d\n\t\tflags dynamic,timeout\n\t\ttimeout %s\n\t}\n",
			m.Name, addrType(t.Family), m.Size, nftDuration(m.Timeout))
	}
	portMark := func(m PortMark) string { return fmt.Sprintf("%s . %s . %s : 0x%08x", m.VIP, m.Proto, m.Ports, m.Mark) }
	if len(t.PortMarks) > 0 {
		fmt.Fprintf(b, "\n\tmap %s {\n\t\ttype %s%s\n", MapFullNATPorts, addrType(t.Family), fullnatPortsType)
		elements(b, 1, t.PortMarks, portMark)
		b.WriteString("\t}\n")
	}
	if len(t.RangeMarks) > 0 {
		fmt.Fprintf(b, "\n\tmap %s {\n\t\ttype %s%s\n\t\tflags interval\n", MapFullNATRanges, addrType(t.Family), fullnatPortsType)
		elements(b, 1, t.RangeMarks, portMark)
		b.WriteString("\t}\n")
	}
	if len(t.VIPMarks) > 0 {
		fmt.Fprintf(b, "\n\tmap %s {\n\t\ttype %s : mark\n", MapFullNATAny, addrType(t.Family))
		elements(b, addrsPerLine, t.VIPMarks, func(m VIPMark) string { return fmt.Sprintf("%s : 0x%08x", m.VIP, m.Mark) })
		b.WriteString("\t}\n")
	}
	if len(t.SNATMarks) > 0 {
		fmt.Fprintf(b, "\n\tmap %s {\n\t\ttype mark : verdict\n", MapSNAT)
		elements(b, 5, t.SNATMarks, func(m SNATMark) string { return fmt.Sprintf("0x%08x : goto %s", m.Mark, SNATChainName(m.Chain)) })
		b.WriteString("\t}\n")
	}
	chain := func(name, hook string, rules []Rule) {
		if rules == nil {
			return
		}
		fmt.Fprintf(b, "\n\tchain %s {\n", name)
		if hook != "" {
			fmt.Fprintf(b, "\t\t%s\n", hook)
		}
		for _, r := range rules {
			fmt.Fprintf(b, "\t\t%s\n", r.format(t.Family))
		}
		b.WriteString("\t}\n")
	}
	chain(ChainPrerouting, "type filter hook prerouting priority mangle; policy accept;", t.Pre)
	chain(ChainFullNAT, "", t.FullNAT)
	chain(ChainPostrouting, "type nat hook postrouting priority srcnat; policy accept;", t.Post)
	for i := range t.SNATChains {
		chain(SNATChainName(i), "", []Rule{t.snatRule(i)})
	}
	chain(ChainInput, "type filter hook input priority filter; policy accept;", t.Input)
	chain(ChainOutput, "type filter hook output priority filter; policy accept;", t.Output)
	b.WriteString("}\n")
}

// elements prints the elements line of a named set or map, perLine a line.
func elements[T any](b *strings.Builder, perLine int, es []T, format func(T) string) {
	if len(es) == 0 {
		return
	}
	b.WriteString("\t\telements = { ")
	for i, e := range es {
		if i > 0 {
			if i%perLine == 0 {
				b.WriteString(",\n\t\t\t     ")
			} else {
				b.WriteString(", ")
			}
		}
		b.WriteString(format(e))
	}
	b.WriteString(" }\n")
}

func addrType(f Family) string {
	if f == IPv4 {
		return "ipv4_addr"
	}
	return "ipv6_addr"
}

// format prints the rule as nft lists it.
func (r Rule) format(f Family) string {
	var w []string
	add := func(format string, a ...any) { w = append(w, fmt.Sprintf(format, a...)) }
	ip := f.NFTName()
	if r.OIF != "" {
		add("oifname \"%s\"", r.OIF)
	}
	if r.NotIIF != "" {
		add("iifname != \"%s\"", r.NotIIF)
	}
	if r.NotVIP {
		add("%s daddr != @%s", ip, VIPSet)
	}
	if r.DAddr.IsValid() {
		add("%s daddr %s", ip, r.DAddr)
	}
	if len(r.DAddrs) > 0 {
		add("%s daddr %s", ip, list(r.DAddrs))
	}
	if len(r.SAddr) > 0 {
		add("%s saddr %s", ip, list(r.SAddr))
	}
	if len(r.Protos) > 0 {
		add("meta l4proto %s", list(r.Protos))
	}
	switch {
	case len(r.Ports) > 0:
		// nft hides the "meta l4proto" dependency of a port match.
		add("%s dport %s", r.Proto, list(r.Ports))
	case r.Proto != l4.Any:
		add("meta l4proto %s", r.Proto)
	}
	if r.THDport != 0 {
		add("th dport %d", r.THDport)
	}
	if len(r.NotSAddr) > 0 {
		add("%s saddr != %s", ip, list(r.NotSAddr))
	}
	if r.SynAck {
		// nft hides the "meta l4proto tcp" dependency here too.
		add("tcp flags syn,ack / fin,syn,rst,ack")
	}
	if r.MSSAbove != 0 {
		add("tcp option maxseg size > %d", r.MSSAbove)
	}
	if r.CtMark != 0 {
		add("ct mark 0x%08x", r.CtMark)
	}
	if r.CtState != 0 {
		add("ct state %s", ctStateNames(r.CtState))
	}
	if r.Redirect {
		add("icmpv6 type nd-redirect")
	}
	if r.NotRoot {
		add("meta skuid != 0")
	}
	if r.SetMSS != 0 {
		add("tcp option maxseg size set %d", r.SetMSS)
	}
	if r.SetMark != 0 {
		add("meta mark set 0x%08x", r.SetMark)
	}
	if r.SetCtMark != 0 {
		add("ct mark set 0x%08x", r.SetCtMark)
	}
	switch r.SetCtMarkMap {
	case ByPort:
		add("ct mark set %s daddr . meta l4proto . th dport map @%s", ip, MapFullNATPorts)
	case ByPortRange:
		add("ct mark set %s daddr . meta l4proto . th dport map @%s", ip, MapFullNATRanges)
	case ByVIP:
		add("ct mark set %s daddr map @%s", ip, MapFullNATAny)
	}
	if r.CtMarkVmap {
		add("ct mark vmap @%s", MapSNAT)
	}
	if r.SNAT.From.IsValid() {
		// nft prints an aligned range as a prefix. Persistent: the
		// address depends on the client alone (conntrack_hash.go).
		add("snat to %s persistent", r.SNAT)
	}
	if r.Meter != "" {
		add("update @%s { %s saddr limit rate over %d/second burst %d packets }", r.Meter, ip, r.MeterRate, r.MeterBurst)
	}
	switch r.Verdict {
	case Accept:
		add("accept")
	case Return:
		add("return")
	case JumpFullNAT:
		add("jump %s", ChainFullNAT)
	case Drop:
		add("drop")
	}
	if r.Comment != "" {
		add("comment \"%s\"", r.Comment) // checkComment keeps quotes out
	}
	return strings.Join(w, " ")
}

// ctStateNames prints a ct state bit set as nft does: "invalid,new".
func ctStateNames(bits uint32) string {
	var names []string
	for _, s := range []struct {
		bit  uint32
		name string
	}{{CtStateInvalid, "invalid"}, {CtStateEstablished, "established"}, {CtStateRelated, "related"},
		{CtStateNew, "new"}, {CtStateUntracked, "untracked"}} {
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

// nftDuration prints a set timeout as nft does: "10s", "1m", "1m30s".
func nftDuration(d time.Duration) string {
	var out string
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			out += fmt.Sprintf("%d%s", n, u.name)
			d -= n * u.unit
		}
	}
	return out
}
