package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/mdlayher/netlink"
)

// ctnetlink, from include/uapi/linux/netfilter/nfnetlink_conntrack.h and
// nf_conntrack_common.h, nf_conntrack_tcp.h. x/sys/unix has none of them.
const (
	nfnlSubsysCtnetlink = 1
	ipctnlMsgCtNew      = 0
	ipctnlMsgCtGet      = 1
	ipctnlMsgCtDelete   = 2

	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaStatus     = 3
	ctaProtoinfo  = 4
	ctaNATSrc     = 6
	ctaTimeout    = 7
	ctaMark       = 8

	ctaTupleIP    = 1
	ctaTupleProto = 2

	ctaIPv4Src = 1
	ctaIPv4Dst = 2
	ctaIPv6Src = 3
	ctaIPv6Dst = 4

	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3

	ctaProtoinfoTCP              = 1
	ctaProtoinfoTCPState         = 1
	ctaProtoinfoTCPFlagsOriginal = 4
	ctaProtoinfoTCPFlagsReply    = 5

	ctaNATv4MinIP = 1
	ctaNATv4MaxIP = 2
	ctaNATv6MinIP = 4
	ctaNATv6MaxIP = 5

	ipsSeenReply = 1 << 1
	ipsAssured   = 1 << 2
	ipsConfirmed = 1 << 3

	tcpConntrackEstablished = 3
	tcpConntrackTimeWait    = 7
	// ipCtTCPFlagBeLiberal turns window tracking off for the direction: a
	// restored entry has seen no segment, so it knows no window.
	ipCtTCPFlagBeLiberal = 0x08
	// ipCtTCPFlagCloseInit says the direction sent a FIN: with it, a SYN
	// reopens an entry in TIME_WAIT or CLOSE.
	ipCtTCPFlagCloseInit = 0x04

	afInet  = 2
	afInet6 = 10
)

// restoredStatus is what a restored entry claims: both directions seen,
// so that the connection's first packet here makes it assured (TCP: a
// valid segment in ESTABLISHED with the reply seen; UDP: once it is a
// stream; nf_conntrack_proto_*.c), and not assured itself. Until its
// packets come the entry is another director's claim only, which a full
// table may drop: the kernel's early_drop (nf_conntrack_core.c,
// early_drop_list) and its gc_worker above 95 % of nf_conntrack_max skip
// assured entries only; a flood of single-packet flows through the other
// directors must not fill this one's table with entries it cannot shed,
// and so drop its own new flows. ctnetlink_create_conntrack sets
// IPS_CONFIRMED itself before it applies CTA_STATUS, and the kernels that
// check unchangeable bits then refuse a status without it (EBUSY); kernels
// from the weeks between e6d57e9ff0ae and its fix set it after, and refuse
// a status with it. RestoreConntrack tries this one first.
const restoredStatus = ipsSeenReply | ipsConfirmed

// minRestoreTimeout keeps an entry alive until its connection's next packet
// even when the IPVS entry is about to expire: conntrack refreshes it from
// there, and IPVS deletes it when its own entry expires
// (ip_vs_conn_drop_conntrack).
const minRestoreTimeout = 30 * time.Second

// maxRestoreErrors bounds the failures an error of RestoreConntrack names;
// RestoreResult.Failed counts all.
const maxRestoreErrors = 3

// checkEntry validates what the kernel would refuse or misread.
func checkEntry(e ConntrackEntry) error {
	if e.Protocol != l4.TCP && e.Protocol != l4.UDP {
		return fmt.Errorf("protocol %s: only tcp and udp entries are restored", e.Protocol)
	}
	v4 := e.VIP.Addr().Is4()
	for _, a := range []struct {
		what string
		ok   bool
	}{
		{"client", e.Client.IsValid() && e.Client.Addr().Is4() == v4 && e.Client.Port() != 0},
		{"VIP", e.VIP.IsValid() && e.VIP.Port() != 0},
		{"backend", e.Backend.IsValid() && e.Backend.Addr().Is4() == v4 && e.Backend.Port() != 0},
		{"SNAT range", e.SNATFrom.Is4() == v4 && e.SNATTo.Is4() == v4 && e.SNATFrom.IsValid() && e.SNATTo.IsValid() &&
			e.SNATFrom.Compare(e.SNATTo) <= 0},
	} {
		if !a.ok {
			return fmt.Errorf("invalid %s (all addresses of one family, ports non-zero)", a.what)
		}
	}
	return nil
}

// newConntrackMessage is the IPCTNL_MSG_CT_NEW request creating e, with
// NLM_F_EXCL: an existing entry is reported (EEXIST), never changed.
func newConntrackMessage(e ConntrackEntry, status uint32) (netlink.Message, error) {
	ae, err := encoder(e)
	if err != nil {
		return netlink.Message{}, err
	}
	natMin, natMax := uint16(ctaNATv4MinIP), uint16(ctaNATv4MaxIP)
	if e.VIP.Addr().Is6() {
		natMin, natMax = ctaNATv6MinIP, ctaNATv6MaxIP
	}
	tuple := tupleEncoder(e, ae)
	tuple(ctaTupleOrig, e.Client, e.VIP)
	tuple(ctaTupleReply, e.Backend, e.Client)
	ae.Uint32(ctaStatus, status)
	tcpState(e, ae)
	// The one address the persistent rule gives the client, and no port
	// range: nf_nat keeps the client's port when it is free, as it did on
	// the old owner.
	snat := snatAddress(e.Client.Addr(), e.SNATFrom, e.SNATTo).AsSlice()
	ae.Nested(ctaNATSrc, func(n *netlink.AttributeEncoder) error {
		n.Bytes(natMin, snat)
		n.Bytes(natMax, snat)
		return nil
	})
	timeout := e.Timeout
	if e.CreateTimeout > 0 {
		timeout = e.CreateTimeout
	}
	ae.Uint32(ctaTimeout, uint32(max(timeout, minRestoreTimeout)/time.Second))
	ae.Uint32(ctaMark, e.Mark)
	return request(e, ipctnlMsgCtNew, netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl, ae)
}

// tcpState writes the TCP state and flags of a restored entry, none for
// UDP: ESTABLISHED, or TIME_WAIT with the close seen (Closing), without
// window tracking either way.
func tcpState(e ConntrackEntry, ae *netlink.AttributeEncoder) {
	if e.Protocol != l4.TCP {
		return
	}
	state, flags := uint8(tcpConntrackEstablished), byte(ipCtTCPFlagBeLiberal)
	if e.Closing {
		state, flags = tcpConntrackTimeWait, ipCtTCPFlagBeLiberal|ipCtTCPFlagCloseInit
	}
	ae.Nested(ctaProtoinfo, func(pi *netlink.AttributeEncoder) error {
		pi.Nested(ctaProtoinfoTCP, func(tcp *netlink.AttributeEncoder) error {
			tcp.Uint8(ctaProtoinfoTCPState, state)
			// struct nf_ct_tcp_flags { __u8 flags; __u8 mask; }
			tcp.Bytes(ctaProtoinfoTCPFlagsOriginal, []byte{flags, flags})
			tcp.Bytes(ctaProtoinfoTCPFlagsReply, []byte{flags, flags})
			return nil
		})
		return nil
	})
}

// newRefreshMessage is the IPCTNL_MSG_CT_NEW request that gives e's
// existing entry e's timeout (and, Closing, its state): without
// NLM_F_CREATE and NLM_F_EXCL ctnetlink changes the entry its tuple finds,
// and only what the request carries. The tuple is the reply one, source
// NAT included, so that only the entry of this very connection is found
// (ENOENT otherwise: none, or another connection's with the same original
// tuple).
func newRefreshMessage(e ConntrackEntry) (netlink.Message, error) {
	ae, err := encoder(e)
	if err != nil {
		return netlink.Message{}, err
	}
	snat := netip.AddrPortFrom(snatAddress(e.Client.Addr(), e.SNATFrom, e.SNATTo), e.Client.Port())
	tupleEncoder(e, ae)(ctaTupleReply, e.Backend, snat)
	ae.Uint32(ctaTimeout, uint32(max(e.Timeout, minRestoreTimeout)/time.Second))
	if e.Closing {
		tcpState(e, ae)
	}
	return request(e, ipctnlMsgCtNew, netlink.Request|netlink.Acknowledge, ae)
}

// newDeleteMessage is the IPCTNL_MSG_CT_DELETE request for the entry with
// e's original tuple.
func newDeleteMessage(e ConntrackEntry) (netlink.Message, error) {
	ae, err := encoder(e)
	if err != nil {
		return netlink.Message{}, err
	}
	tupleEncoder(e, ae)(ctaTupleOrig, e.Client, e.VIP)
	return request(e, ipctnlMsgCtDelete, netlink.Request|netlink.Acknowledge, ae)
}

// encoder checks e and returns an encoder for a request about it.
func encoder(e ConntrackEntry) (*netlink.AttributeEncoder, error) {
	if err := checkEntry(e); err != nil {
		return nil, fmt.Errorf("%s: %w", e, err)
	}
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian // ctnetlink's numbers are in network order
	return ae, nil
}

// request wraps ae's attributes in a ctnetlink message of type typ for e's
// family.
func request(e ConntrackEntry, typ uint16, flags netlink.HeaderFlags, ae *netlink.AttributeEncoder) (netlink.Message, error) {
	attrs, err := ae.Encode()
	if err != nil {
		return netlink.Message{}, fmt.Errorf("%s: %w", e, err)
	}
	fam := byte(afInet)
	if e.VIP.Addr().Is6() {
		fam = afInet6
	}
	// nfgenmsg: family, version, resource id.
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysCtnetlink<<8 | typ), Flags: flags},
		Data:   append([]byte{fam, 0, 0, 0}, attrs...),
	}, nil
}

// tupleEncoder returns a function that writes a tuple of e's protocol and
// family (CTA_TUPLE_ORIG or CTA_TUPLE_REPLY) into ae.
func tupleEncoder(e ConntrackEntry, ae *netlink.AttributeEncoder) func(typ uint16, from, to netip.AddrPort) {
	src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if e.VIP.Addr().Is6() {
		src, dst = ctaIPv6Src, ctaIPv6Dst
	}
	return func(typ uint16, from, to netip.AddrPort) {
		ae.Nested(typ, func(t *netlink.AttributeEncoder) error {
			t.Nested(ctaTupleIP, func(ip *netlink.AttributeEncoder) error {
				ip.Bytes(src, from.Addr().AsSlice())
				ip.Bytes(dst, to.Addr().AsSlice())
				return nil
			})
			t.Nested(ctaTupleProto, func(p *netlink.AttributeEncoder) error {
				p.Uint8(ctaProtoNum, uint8(e.Protocol))
				p.Uint16(ctaProtoSrcPort, from.Port())
				p.Uint16(ctaProtoDstPort, to.Port())
				return nil
			})
			return nil
		})
	}
}
