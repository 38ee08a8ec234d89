package nat

import (
	"encoding/binary"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/lvsd/lvsd/nat/rules"
)

// 32-bit registers (NFT_REG32_00 ...) and the 128-bit register a key's
// first field is loaded into: nft packs the fields of a concatenated key
// into consecutive 32-bit registers starting at NFT_REG_1.
const (
	reg32First = 8 // NFT_REG32_00, the first 32 bits of NFT_REG_1
	reg32Size  = 4
)

// fullnatMaps adds the table's FULLNAT maps that have elements, as nft
// 1.0.6 creates them from the text Ruleset.String prints.
func (b batch) fullnatMaps(t rules.Table) (map[string]*nftables.Set, error) {
	maps := map[string]*nftables.Set{}
	portKey := nftables.MustConcatSetType(b.addrType(), nftables.TypeInetProto, nftables.TypeInetService)
	for _, pm := range []struct {
		name     string
		elems    []rules.PortMark
		interval bool
	}{{rules.MapFullNATPorts, t.PortMarks, false}, {rules.MapFullNATRanges, t.RangeMarks, true}} {
		if len(pm.elems) == 0 {
			continue
		}
		s := &nftables.Set{Table: b.tbl, Name: pm.name, IsMap: true, Interval: pm.interval, Concatenation: true,
			KeyType: portKey, DataType: nftables.TypeMark}
		elems := make([]nftables.SetElement, len(pm.elems))
		for i, m := range pm.elems {
			// Each field fills whole 32-bit registers.
			key := func(port uint16) []byte {
				k := append(m.VIP.AsSlice(), byte(m.Proto), 0, 0, 0)
				return append(binary.BigEndian.AppendUint16(k, port), 0, 0)
			}
			elems[i] = nftables.SetElement{Key: key(m.Ports.From), Val: markData(m.Mark)}
			if pm.interval {
				elems[i].KeyEnd = key(m.Ports.To)
			}
		}
		if err := b.addSet(s, elems); err != nil {
			return nil, err
		}
		maps[s.Name] = s
	}
	if len(t.VIPMarks) > 0 {
		s := &nftables.Set{Table: b.tbl, Name: rules.MapFullNATAny, IsMap: true, KeyType: b.addrType(), DataType: nftables.TypeMark}
		elems := make([]nftables.SetElement, len(t.VIPMarks))
		for i, m := range t.VIPMarks {
			elems[i] = nftables.SetElement{Key: m.VIP.AsSlice(), Val: markData(m.Mark)}
		}
		if err := b.addSet(s, elems); err != nil {
			return nil, err
		}
		maps[s.Name] = s
	}
	if len(t.SNATMarks) > 0 {
		s := &nftables.Set{Table: b.tbl, Name: rules.MapSNAT, IsMap: true, KeyType: nftables.TypeMark, DataType: nftables.TypeVerdict,
			KeyByteOrder: binaryutil.NativeEndian}
		// Its elements come with snatMarks, once their chains exist.
		if err := b.c.AddSet(s, nil); err != nil {
			return nil, err
		}
		maps[s.Name] = s
	}
	return maps, nil
}

// snatMarks adds the elements of snat_marks: the goto of each ct mark.
func (b batch) snatMarks(t rules.Table) error {
	if len(t.SNATMarks) == 0 {
		return nil
	}
	elems := make([]nftables.SetElement, len(t.SNATMarks))
	for i, m := range t.SNATMarks {
		elems[i] = nftables.SetElement{Key: native32(m.Mark),
			VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: rules.SNATChainName(m.Chain)}}
	}
	return b.addElements(b.maps[rules.MapSNAT], elems)
}

// elementsPerMessage keeps each message's list of elements, a netlink
// attribute, under its 64 KiB limit (an element of fullnat_ranges takes
// about 100 bytes in ip6); nft splits its batches likewise.
const elementsPerMessage = 256

// addSet adds s and its elements.
func (b batch) addSet(s *nftables.Set, elems []nftables.SetElement) error {
	if err := b.c.AddSet(s, nil); err != nil {
		return err
	}
	return b.addElements(s, elems)
}

// addElements adds elems to s, elementsPerMessage per message.
func (b batch) addElements(s *nftables.Set, elems []nftables.SetElement) error {
	for chunk := range slices.Chunk(elems, elementsPerMessage) {
		if err := b.c.SetAddElements(s, chunk); err != nil {
			return err
		}
	}
	return nil
}

// mapActions are the lookups of the FULLNAT maps: the ct mark from
// fullnat_ports, fullnat_ranges or fullnat_any, the jump to the SNAT chain of the ct mark
// from snat_marks.
func (b batch) mapActions(r rules.Rule) []expr.Any {
	var e []expr.Any
	switch r.SetCtMarkMap {
	case rules.ByPort, rules.ByPortRange:
		// The protocol and the port follow the address in 32-bit registers.
		proto := uint32(reg32First) + b.addrLen()/reg32Size
		port := proto + 1
		if b.fam == rules.IPv6 {
			proto = 2 // nft names the aligned register by its 128-bit number
		}
		s := b.maps[rules.MapFullNATPorts]
		if r.SetCtMarkMap == rules.ByPortRange {
			s = b.maps[rules.MapFullNATRanges]
		}
		e = append(e, network(b.daddrOffset(), b.addrLen()),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: proto},
			// A no-op on one byte, but nft sends it.
			&expr.Byteorder{SourceRegister: proto, DestRegister: proto, Op: expr.ByteorderHton, Len: 1, Size: 2},
			&expr.Payload{DestRegister: port, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: s.Name, SetID: s.ID},
			markFromData(),
			&expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1})
	case rules.ByVIP:
		s := b.maps[rules.MapFullNATAny]
		e = append(e, network(b.daddrOffset(), b.addrLen()),
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: s.Name, SetID: s.ID},
			markFromData(),
			&expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1})
	}
	if r.CtMarkVmap {
		s := b.maps[rules.MapSNAT]
		e = append(e, &expr.Ct{Key: expr.CtKeyMARK, Register: 1},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
	}
	return e
}

// markData is a ct mark as the data of a map element, and markFromData the
// expression that turns the looked-up data into the mark. nft stores marks
// in host byte order and says so in the map's user data, which
// google/nftables v0.3.0 cannot write; without it nft lists the data as
// big-endian. So the data is big-endian, as nft then lists it right, and
// the rule turns it to host order before setting the mark (nft lists the
// rule without the conversion).
func markData(mark uint32) []byte { return binary.BigEndian.AppendUint32(nil, mark) }

func markFromData() expr.Any {
	return &expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderNtoh, Len: 4, Size: 4}
}
