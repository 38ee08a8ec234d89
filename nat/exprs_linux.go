package nat

import (
	"encoding/binary"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
	"golang.org/x/sys/unix"
)

// batch queues one table's content on a Conn. The expressions are the ones
// nft 1.0.6 itself generates for the same rule text, so that `nft list`
// prints exactly Ruleset.String().
type batch struct {
	c      *nftables.Conn
	tbl    *nftables.Table
	fam    rules.Family
	vips   *nftables.Set
	meters map[string]*nftables.Set
	maps   map[string]*nftables.Set // the FULLNAT maps (fullnatmaps)
}

// Offsets of the addresses in the network header.
func (b batch) saddrOffset() uint32 {
	if b.fam == rules.IPv4 {
		return 12
	}
	return 8
}

func (b batch) daddrOffset() uint32 {
	if b.fam == rules.IPv4 {
		return 16
	}
	return 24
}

func (b batch) addrLen() uint32 {
	if b.fam == rules.IPv4 {
		return 4
	}
	return 16
}

func (b batch) addrType() nftables.SetDatatype {
	if b.fam == rules.IPv4 {
		return nftables.TypeIPAddr
	}
	return nftables.TypeIP6Addr
}

func (b batch) fill(t rules.Table, digest string) error {
	b.vips = &nftables.Set{Table: b.tbl, Name: rules.VIPSet, KeyType: b.addrType(), Comment: rules.CommentPrefix + digest}
	elems := make([]nftables.SetElement, len(t.VIPs))
	for i, a := range t.VIPs {
		elems[i] = nftables.SetElement{Key: a.AsSlice()}
	}
	if err := b.addSet(b.vips, elems); err != nil {
		return err
	}
	b.meters = map[string]*nftables.Set{}
	for _, m := range t.Meters {
		s := &nftables.Set{Table: b.tbl, Name: m.Name, KeyType: b.addrType(), Dynamic: true, HasTimeout: true,
			Timeout: m.Timeout, Size: m.Size}
		if err := b.c.AddSet(s, nil); err != nil {
			return err
		}
		b.meters[m.Name] = s
	}
	var err error
	if b.maps, err = b.fullnatMaps(t); err != nil {
		return err
	}
	// Chains first: the jump to fullnat needs its target to exist.
	accept := nftables.ChainPolicyAccept
	chains := []struct {
		list  []rules.Rule
		chain *nftables.Chain
	}{
		{t.Pre, &nftables.Chain{Name: rules.ChainPrerouting, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept}},
		{t.FullNAT, &nftables.Chain{Name: rules.ChainFullNAT}},
		{t.Post, &nftables.Chain{Name: rules.ChainPostrouting, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept}},
	}
	for i, to := range t.SNATChains {
		chains = append(chains, struct {
			list  []rules.Rule
			chain *nftables.Chain
		}{[]rules.Rule{{SNAT: to}}, &nftables.Chain{Name: rules.SNATChainName(i)}})
	}
	chains = append(chains, []struct {
		list  []rules.Rule
		chain *nftables.Chain
	}{
		{t.Input, &nftables.Chain{Name: rules.ChainInput, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}},
		{t.Output, &nftables.Chain{Name: rules.ChainOutput, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept}},
	}...)
	for _, ch := range chains {
		if ch.list != nil {
			ch.chain.Table = b.tbl
			b.c.AddChain(ch.chain)
		}
	}
	if err := b.snatMarks(t); err != nil {
		return err
	}
	for _, ch := range chains {
		for _, r := range ch.list {
			exprs, err := b.exprs(r)
			if err != nil {
				return err
			}
			nr := &nftables.Rule{Table: b.tbl, Chain: ch.chain, Exprs: exprs}
			if r.Comment != "" {
				nr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
			}
			b.c.AddRule(nr)
		}
	}
	return nil
}

// exprs are r's expressions: what it matches, then what it does.
func (b batch) exprs(r rules.Rule) ([]expr.Any, error) {
	e, err := b.addrMatches(r)
	if err != nil {
		return nil, err
	}
	more, err := b.l4Matches(r)
	if err != nil {
		return nil, err
	}
	e = append(e, more...)
	not, err := b.notSAddr(r.NotSAddr)
	if err != nil {
		return nil, err
	}
	e = append(e, not...)
	e = append(e, stateMatches(r)...)
	return append(e, b.actions(r)...), nil
}

// addrMatches match the output interface and the addresses.
func (b batch) addrMatches(r rules.Rule) ([]expr.Any, error) {
	var e []expr.Any
	if r.OIF != "" {
		name := make([]byte, 16) // IFNAMSIZ, zero-padded as nft sends it
		copy(name, r.OIF)
		e = append(e, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, eq(name))
	}
	if r.NotIIF != "" {
		name := make([]byte, 16)
		copy(name, r.NotIIF)
		e = append(e, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, cmpOp(expr.CmpOpNeq, name))
	}
	if r.NotVIP {
		e = append(e, network(b.daddrOffset(), b.addrLen()),
			&expr.Lookup{SourceRegister: 1, SetName: b.vips.Name, SetID: b.vips.ID, Invert: true})
	}
	if r.DAddr.IsValid() {
		e = append(e, network(b.daddrOffset(), b.addrLen()), eq(r.DAddr.AsSlice()))
	}
	for _, m := range []struct {
		offset uint32
		ranges []rules.AddrRange
	}{{b.daddrOffset(), r.DAddrs}, {b.saddrOffset(), r.SAddr}} {
		switch len(m.ranges) {
		case 0:
		case 1:
			e = append(e, b.addrRange(m.offset, m.ranges[0])...)
		default:
			lookup, err := b.anonSet(b.addrType(), addrElems(m.ranges))
			if err != nil {
				return nil, err
			}
			e = append(e, network(m.offset, b.addrLen()), lookup)
		}
	}
	return e, nil
}

// l4Matches match the protocol and the destination ports.
func (b batch) l4Matches(r rules.Rule) ([]expr.Any, error) {
	var e []expr.Any
	if r.Proto != l4.Any {
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq([]byte{byte(r.Proto)}))
	}
	if len(r.Protos) > 0 {
		// nft makes a constant set of plain keys (no intervals) for "{ tcp, udp }".
		s := &nftables.Set{Table: b.tbl, Anonymous: true, Constant: true, KeyType: nftables.TypeInetProto}
		elems := make([]nftables.SetElement, len(r.Protos))
		for i, p := range r.Protos {
			elems[i] = nftables.SetElement{Key: []byte{byte(p)}}
		}
		if err := b.c.AddSet(s, elems); err != nil {
			return nil, err
		}
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID})
	}
	if r.THDport != 0 {
		e = append(e, dport(), eq(be16(r.THDport)))
	}
	if r.SynAck {
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq([]byte{unix.IPPROTO_TCP}),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{tcpFIN | tcpSYN | tcpRST | tcpACK}, Xor: []byte{0}},
			eq([]byte{tcpSYN | tcpACK}))
	}
	if r.MSSAbove != 0 {
		e = append(e, mssOption(0), cmpOp(expr.CmpOpGt, be16(r.MSSAbove)))
	}
	switch len(r.Ports) {
	case 0:
	case 1:
		e = append(e, dport())
		p := r.Ports[0]
		if p.From == p.To {
			e = append(e, eq(be16(p.From)))
		} else {
			e = append(e, cmpOp(expr.CmpOpGte, be16(p.From)), cmpOp(expr.CmpOpLte, be16(p.To)))
		}
	default:
		lookup, err := b.anonSet(nftables.TypeInetService, portElems(r.Ports))
		if err != nil {
			return nil, err
		}
		e = append(e, dport(), lookup)
	}
	return e, nil
}

// stateMatches match the conntrack mark and state, an ICMPv6 redirect and
// the sending socket's user.
func stateMatches(r rules.Rule) []expr.Any {
	var e []expr.Any
	if r.CtMark != 0 {
		e = append(e, &expr.Ct{Key: expr.CtKeyMARK, Register: 1}, eq(native32(r.CtMark)))
	}
	if r.CtState != 0 {
		e = append(e, &expr.Ct{Key: expr.CtKeySTATE, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(r.CtState), Xor: native32(0)},
			cmpOp(expr.CmpOpNeq, native32(0)))
	}
	if r.Redirect {
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq([]byte{unix.IPPROTO_ICMPV6}),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			eq([]byte{137})) // ND_REDIRECT
	}
	if r.NotRoot {
		e = append(e, &expr.Meta{Key: expr.MetaKeySKUID, Register: 1}, cmpOp(expr.CmpOpNeq, native32(0)))
	}
	return e
}

// actions set marks, translate the source and give the verdict.
func (b batch) actions(r rules.Rule) []expr.Any {
	var e []expr.Any
	if r.SetMSS != 0 {
		e = append(e, &expr.Immediate{Register: 1, Data: be16(r.SetMSS)}, mssOption(1))
	}
	if r.SetMark != 0 {
		e = append(e, &expr.Immediate{Register: 1, Data: native32(r.SetMark)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
	}
	if r.SetCtMark != 0 {
		e = append(e, &expr.Immediate{Register: 1, Data: native32(r.SetCtMark)},
			&expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1})
	}
	e = append(e, b.mapActions(r)...)
	if r.SNAT.From.IsValid() {
		nat := &expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, Persistent: true}
		if b.fam == rules.IPv6 {
			nat.Family = unix.NFPROTO_IPV6
		}
		e = append(e, &expr.Immediate{Register: 1, Data: r.SNAT.From.AsSlice()})
		if r.SNAT.To != r.SNAT.From {
			e = append(e, &expr.Immediate{Register: 2, Data: r.SNAT.To.AsSlice()})
			nat.RegAddrMax = 2
		}
		e = append(e, nat)
	}
	if m := b.meters[r.Meter]; m != nil {
		e = append(e, network(b.saddrOffset(), b.addrLen()),
			&expr.Dynset{SrcRegKey: 1, SetName: m.Name, SetID: m.ID, Operation: unix.NFT_DYNSET_OP_UPDATE,
				Exprs: []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.MeterRate), Over: true,
					Unit: expr.LimitTimeSecond, Burst: r.MeterBurst}}})
	}
	switch r.Verdict {
	case rules.Accept:
		e = append(e, &expr.Verdict{Kind: expr.VerdictAccept})
	case rules.Return:
		e = append(e, &expr.Verdict{Kind: expr.VerdictReturn})
	case rules.JumpFullNAT:
		e = append(e, &expr.Verdict{Kind: expr.VerdictJump, Chain: rules.ChainFullNAT})
	case rules.Drop:
		e = append(e, &expr.Verdict{Kind: expr.VerdictDrop})
	}
	return e
}

// addrRange matches one address range the way nft does: a byte-aligned
// prefix loads only its bytes, other prefixes are masked, and a range that
// is no prefix is compared from both ends.
func (b batch) addrRange(offset uint32, r rules.AddrRange) []expr.Any {
	p, isPrefix := r.Prefix()
	switch {
	case r.From == r.To:
		return []expr.Any{network(offset, b.addrLen()), eq(r.From.AsSlice())}
	case isPrefix && p.Bits()%8 == 0:
		n := uint32(p.Bits() / 8)
		return []expr.Any{network(offset, n), eq(r.From.AsSlice()[:n])}
	case isPrefix:
		mask := make([]byte, b.addrLen())
		for i := range p.Bits() {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		return []expr.Any{
			network(offset, b.addrLen()),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: b.addrLen(), Mask: mask, Xor: make([]byte, b.addrLen())},
			eq(r.From.AsSlice()),
		}
	}
	return []expr.Any{network(offset, b.addrLen()), cmpOp(expr.CmpOpGte, r.From.AsSlice()), cmpOp(expr.CmpOpLte, r.To.AsSlice())}
}

// notSAddr matches sources outside rs as nft does: a lone prefix by
// comparing its bytes (masked when it is not byte-aligned), a lone range
// by a range expression, several through an inverted set lookup.
func (b batch) notSAddr(rs []rules.AddrRange) ([]expr.Any, error) {
	switch len(rs) {
	case 0:
		return nil, nil
	case 1:
		r := rs[0]
		p, isPrefix := r.Prefix()
		switch {
		case r.From == r.To:
			return []expr.Any{network(b.saddrOffset(), b.addrLen()), cmpOp(expr.CmpOpNeq, r.From.AsSlice())}, nil
		case isPrefix && p.Bits()%8 == 0:
			n := uint32(p.Bits() / 8)
			return []expr.Any{network(b.saddrOffset(), n), cmpOp(expr.CmpOpNeq, r.From.AsSlice()[:n])}, nil
		case isPrefix:
			mask := make([]byte, b.addrLen())
			for i := range p.Bits() {
				mask[i/8] |= 0x80 >> (i % 8)
			}
			return []expr.Any{network(b.saddrOffset(), b.addrLen()),
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: b.addrLen(), Mask: mask, Xor: make([]byte, b.addrLen())},
				cmpOp(expr.CmpOpNeq, r.From.AsSlice())}, nil
		}
		return []expr.Any{network(b.saddrOffset(), b.addrLen()),
			&expr.Range{Op: expr.CmpOpNeq, Register: 1, FromData: r.From.AsSlice(), ToData: r.To.AsSlice()}}, nil
	}
	s := &nftables.Set{Table: b.tbl, Anonymous: true, Constant: true, Interval: true, KeyType: b.addrType()}
	if err := b.c.AddSet(s, addrElems(rs)); err != nil {
		return nil, err
	}
	return []expr.Any{network(b.saddrOffset(), b.addrLen()),
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: true}}, nil
}

// anonSet adds a constant interval set and returns the lookup into it.
func (b batch) anonSet(t nftables.SetDatatype, elems []nftables.SetElement) (expr.Any, error) {
	s := &nftables.Set{Table: b.tbl, Anonymous: true, Constant: true, Interval: true, KeyType: t}
	if err := b.c.AddSet(s, elems); err != nil {
		return nil, err
	}
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}, nil
}

// Interval set elements: a start key, and an end flag on the first key past
// the range. A range reaching the largest key has no end element: the
// kernel then matches up to the end of the key space.
func addrElems(rs []rules.AddrRange) []nftables.SetElement {
	var es []nftables.SetElement
	for _, r := range rs {
		es = append(es, nftables.SetElement{Key: r.From.AsSlice()})
		if next := r.To.Next(); next.IsValid() {
			es = append(es, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return es
}

func portElems(ps []l4.PortRange) []nftables.SetElement {
	var es []nftables.SetElement
	for _, p := range ps {
		es = append(es, nftables.SetElement{Key: be16(p.From)})
		if p.To < 0xffff {
			es = append(es, nftables.SetElement{Key: be16(p.To + 1), IntervalEnd: true})
		}
	}
	return es
}

// TCP header flags (the byte at offset 13).
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// mssOption loads the TCP MSS option's value (option kind 2, two bytes
// after the kind and length) into register 1, or with from 1 writes
// register 1 into it.
func mssOption(from uint32) expr.Any {
	x := &expr.Exthdr{Op: expr.ExthdrOpTcpopt, Type: 2, Offset: 2, Len: 2, SourceRegister: from}
	if from == 0 {
		x.DestRegister = 1
	}
	return x
}

func network(offset, n uint32) expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n}
}

// dport loads the destination port, at the same offset in tcp, udp and sctp.
func dport() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

func eq(data []byte) expr.Any { return cmpOp(expr.CmpOpEq, data) }

func cmpOp(op expr.CmpOp, data []byte) expr.Any {
	return &expr.Cmp{Op: op, Register: 1, Data: data}
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// native32 encodes marks: the kernel keeps them in host byte order.
func native32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
