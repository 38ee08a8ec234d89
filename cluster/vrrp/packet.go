package vrrp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Protocol numbers and addresses of RFC 5798 section 5.1.
const (
	Protocol = 112 // IP protocol number of VRRP
	// TTL is the IPv4 TTL and IPv6 hop limit of every advertisement: a
	// router discards one that arrives with another, so none can come from
	// beyond the link.
	TTL = 255
)

// Groups are the multicast destinations of advertisements.
var (
	GroupV4 = netip.MustParseAddr("224.0.0.18")
	GroupV6 = netip.MustParseAddr("ff02::12")
)

const (
	version       = 3
	typeAdvert    = 1
	headerLen     = 8
	maxInterval   = 1<<12 - 1 // centiseconds in the 12-bit Max Adver Int field
	maxAddressesV = 255       // the count is one byte
)

// Advert is a VRRPv3 advertisement.
type Advert struct {
	VRID     uint8
	Priority uint8 // 0: the master stops; 255: the address owner
	// Interval is Max Adver Int, in centiseconds (1-4095).
	Interval  uint16
	Addresses []netip.Addr // all of one family
}

// Drop reasons: what was wrong with a received packet. Each is counted.
var (
	ErrTTL       = errors.New("TTL/hop limit is not 255 (the sender is not on this link)")
	ErrShort     = errors.New("shorter than a VRRP header")
	ErrVersion   = errors.New("not VRRP version 3")
	ErrType      = errors.New("not an advertisement")
	ErrChecksum  = errors.New("bad checksum")
	ErrLength    = errors.New("length does not match the address count")
	ErrNoAddress = errors.New("no address")
	ErrInterval  = errors.New("advertisement interval 0")
	ErrVRID      = errors.New("another virtual router ID")
	ErrFamily    = errors.New("addresses of another family than the sender")
)

// Marshal encodes a as sent from src to dst (the checksum covers a
// pseudo-header of both, RFC 5798 section 5.2.8, as keepalived and FRR do
// for IPv4 too).
func (a Advert) Marshal(src, dst netip.Addr) ([]byte, error) {
	if len(a.Addresses) == 0 || len(a.Addresses) > maxAddressesV {
		return nil, fmt.Errorf("vrrp: %d addresses, want 1-%d", len(a.Addresses), maxAddressesV)
	}
	if a.Interval == 0 || a.Interval > maxInterval {
		return nil, fmt.Errorf("vrrp: interval %d cs, want 1-%d", a.Interval, maxInterval)
	}
	size := src.BitLen() / 8
	b := make([]byte, headerLen, headerLen+size*len(a.Addresses))
	b[0] = version<<4 | typeAdvert
	b[1], b[2], b[3] = a.VRID, a.Priority, uint8(len(a.Addresses))
	binary.BigEndian.PutUint16(b[4:], a.Interval)
	for _, v := range a.Addresses {
		if v.BitLen() != src.BitLen() {
			return nil, fmt.Errorf("vrrp: address %s is not of the family of the source %s", v, src)
		}
		b = append(b, v.AsSlice()...)
	}
	binary.BigEndian.PutUint16(b[6:], checksum(b, src, dst))
	return b, nil
}

// Parse validates a VRRP packet received from src for dst with ttl and
// decodes it. It never reads beyond b and allocates at most the address
// list, which the one-byte count bounds.
func Parse(b []byte, src, dst netip.Addr, ttl int) (Advert, error) {
	if ttl != TTL {
		return Advert{}, ErrTTL
	}
	if len(b) < headerLen {
		return Advert{}, ErrShort
	}
	if b[0]>>4 != version {
		return Advert{}, ErrVersion
	}
	if b[0]&0x0f != typeAdvert {
		return Advert{}, ErrType
	}
	size := src.BitLen() / 8
	if size == 0 || dst.BitLen() != src.BitLen() {
		return Advert{}, ErrFamily
	}
	n := int(b[3])
	if n == 0 {
		return Advert{}, ErrNoAddress
	}
	if len(b) != headerLen+n*size {
		return Advert{}, ErrLength
	}
	if checksum(b, src, dst) != 0 {
		return Advert{}, ErrChecksum
	}
	a := Advert{VRID: b[1], Priority: b[2], Interval: binary.BigEndian.Uint16(b[4:]) & maxInterval,
		Addresses: make([]netip.Addr, 0, n)}
	if a.Interval == 0 {
		return Advert{}, ErrInterval
	}
	for i := headerLen; i < len(b); i += size {
		v, _ := netip.AddrFromSlice(b[i : i+size])
		a.Addresses = append(a.Addresses, v)
	}
	return a, nil
}

// checksum is the Internet checksum of b with the pseudo-header of src,
// dst, protocol 112 and b's length; over a packet whose checksum field is
// right it is 0.
func checksum(b []byte, src, dst netip.Addr) uint16 {
	var sum uint32
	add := func(p []byte) {
		for i := 0; i+1 < len(p); i += 2 {
			sum += uint32(p[i])<<8 | uint32(p[i+1])
		}
		if len(p)%2 == 1 {
			sum += uint32(p[len(p)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	sum += Protocol + uint32(len(b))
	add(b)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
