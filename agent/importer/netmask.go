package importer

import (
	"fmt"
	"net/netip"
	"strconv"
)

// PrefixLen reads a persistence netmask as keepalived and ipvsadm write
// it: a prefix length from 1 to most, or a contiguous IPv4 netmask such as
// 255.255.255.0.
func PrefixLen(s string, most int) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= most {
		return n, nil
	}
	m, err := netip.ParseAddr(s)
	if err != nil || !m.Is4() {
		return 0, fmt.Errorf("netmask %q is not a netmask like 255.255.255.0 or a prefix length", s)
	}
	b := m.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	bits := 0
	for v&(1<<31) != 0 {
		bits++
		v <<= 1
	}
	if v != 0 || bits == 0 {
		return 0, fmt.Errorf("netmask %q has holes", s)
	}
	return bits, nil
}
