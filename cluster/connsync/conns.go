package connsync

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// Conn is a connection another director sent and this one applied, as
// Config.Applied gets it.
type Conn struct {
	Protocol uint8          // IP protocol number
	Client   netip.AddrPort // caddr:cport
	Virtual  netip.AddrPort // vaddr:vport: the VIP and the port the client asked for
	Dest     netip.AddrPort // the real server
	// Masquerade says the connection is forwarded by NAT (IPVS
	// masquerading: NAT and FULLNAT services).
	Masquerade bool
	// State is the IPVS state in its protocol's numbering
	// (IP_VS_TCP_S_ESTABLISHED is 1).
	State uint16
	// Timeout is the connection's remaining life when its director sent
	// it; 0: the kernel's default for the state.
	Timeout time.Duration
	// Origin is the director the connection started on, whose source
	// addresses a FULLNAT connection has (origins.go); "": unknown.
	Origin string
}

// connFwdMask and connFMasq are IP_VS_CONN_F_FWD_MASK and
// IP_VS_CONN_F_MASQ.
const (
	connFwdMask = 0x0007
	connFMasq   = 0x0000
)

// appendConns appends the connections of recs, which sender sent,
// persistence templates left out, to dst.
func appendConns(dst []Conn, recs []rec, sender string) []Conn {
	for _, r := range recs {
		if r.flags()&connFTemplate != 0 {
			continue
		}
		n := r.addrLen()
		client, _ := netip.AddrFromSlice(r[offAddrs : offAddrs+n])
		dst = append(dst, Conn{
			Protocol:   r.protocol(),
			Client:     netip.AddrPortFrom(client, binary.BigEndian.Uint16(r[offCport:])),
			Virtual:    netip.AddrPortFrom(r.vaddr(), r.vport()),
			Dest:       r.dest(),
			Masquerade: masquerade(r),
			State:      binary.BigEndian.Uint16(r[offState:]),
			Timeout:    time.Duration(r.timeout()) * time.Second,
			Origin:     recordOrigin(r, sender),
		})
	}
	return dst
}
