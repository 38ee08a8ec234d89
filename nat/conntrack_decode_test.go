package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/mdlayher/netlink"
)

// A ctnetlink decoder for the tests: it reads back the requests
// newConntrackMessage encodes and the entries the kernel dumps.

// dumpedEntry is what a ctnetlink dump says of an entry.
type dumpedEntry struct {
	proto          l4.Protocol
	orig, reply    [2]netip.AddrPort // source, destination
	status, mark   uint32
	timeout        uint32
	tcpState       uint8
	tcpFlags       [2]uint8   // original, reply
	hasTCP         bool       // CTA_PROTOINFO_TCP present
	natMin, natMax netip.Addr // CTA_NAT_SRC: requests only, dumps have none
}

func (d dumpedEntry) String() string {
	return fmt.Sprintf("%s %s->%s reply %s->%s status %#x mark %#x timeout %d tcp state %d flags %v",
		d.proto, d.orig[0], d.orig[1], d.reply[0], d.reply[1], d.status, d.mark, d.timeout, d.tcpState, d.tcpFlags)
}

func decodeEntry(t *testing.T, b []byte) dumpedEntry {
	t.Helper()
	var d dumpedEntry
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		t.Fatal(err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case ctaTupleOrig:
			ad.Nested(func(nad *netlink.AttributeDecoder) error { d.orig, d.proto = decodeTuple(nad); return nil })
		case ctaTupleReply:
			ad.Nested(func(nad *netlink.AttributeDecoder) error { d.reply, _ = decodeTuple(nad); return nil })
		case ctaStatus:
			d.status = ad.Uint32()
		case ctaMark:
			d.mark = ad.Uint32()
		case ctaTimeout:
			d.timeout = ad.Uint32()
		case ctaNATSrc:
			ad.Nested(func(n *netlink.AttributeDecoder) error {
				for n.Next() {
					a, _ := netip.AddrFromSlice(n.Bytes())
					switch n.Type() {
					case ctaNATv4MinIP, ctaNATv6MinIP:
						d.natMin = a
					case ctaNATv4MaxIP, ctaNATv6MaxIP:
						d.natMax = a
					}
				}
				return nil
			})
		case ctaProtoinfo:
			ad.Nested(func(pi *netlink.AttributeDecoder) error {
				for pi.Next() {
					if pi.Type() != ctaProtoinfoTCP {
						continue
					}
					d.hasTCP = true
					pi.Nested(func(tcp *netlink.AttributeDecoder) error {
						for tcp.Next() {
							switch tcp.Type() {
							case ctaProtoinfoTCPState:
								d.tcpState = tcp.Uint8()
							case ctaProtoinfoTCPFlagsOriginal:
								d.tcpFlags[0] = tcp.Bytes()[0]
							case ctaProtoinfoTCPFlagsReply:
								d.tcpFlags[1] = tcp.Bytes()[0]
							}
						}
						return nil
					})
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// decodeTuple reads CTA_TUPLE_IP and CTA_TUPLE_PROTO: source, destination.
func decodeTuple(ad *netlink.AttributeDecoder) ([2]netip.AddrPort, l4.Protocol) {
	var addrs [2]netip.Addr
	var ports [2]uint16
	var proto l4.Protocol
	for ad.Next() {
		switch ad.Type() {
		case ctaTupleIP:
			ad.Nested(func(ip *netlink.AttributeDecoder) error {
				for ip.Next() {
					a, _ := netip.AddrFromSlice(ip.Bytes())
					switch ip.Type() {
					case ctaIPv4Src, ctaIPv6Src:
						addrs[0] = a
					case ctaIPv4Dst, ctaIPv6Dst:
						addrs[1] = a
					}
				}
				return nil
			})
		case ctaTupleProto:
			ad.Nested(func(p *netlink.AttributeDecoder) error {
				for p.Next() {
					switch p.Type() {
					case ctaProtoNum:
						proto = l4.Protocol(p.Uint8())
					case ctaProtoSrcPort:
						ports[0] = p.Uint16()
					case ctaProtoDstPort:
						ports[1] = p.Uint16()
					}
				}
				return nil
			})
		}
	}
	return [2]netip.AddrPort{netip.AddrPortFrom(addrs[0], ports[0]), netip.AddrPortFrom(addrs[1], ports[1])}, proto
}
