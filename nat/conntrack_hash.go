package nat

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Which SNAT address a connection gets. The FULLNAT rule is "snat to A-B
// persistent": nf_nat_core's find_best_ips_proto hashes the client address
// alone (jhash2 with initval 0; without "persistent" the initval is the
// destination, the real server). The address is then the same for every
// connection of a client, which matters for a restore: nf_nat first reuses
// the mapping of an existing entry with the same client address and port
// (find_appropriate_src), so without "persistent" a connection whose client
// port another connection used before (to another real server, or a closed
// one still in the table) inherits that one's address, which only the old
// owner's history knows.
//
// ctnetlink cannot ask for a persistent range (CTA_NAT_* carry no flags), so
// a restore computes the address here, as the kernel does, and asks for
// exactly that one. TestRestoredEntriesCarryTraffic checks it against the
// kernel's own choice.

// snatAddress returns the address of the range from-to that a persistent
// source NAT gives client.
func snatAddress(client, from, to netip.Addr) netip.Addr {
	if from == to {
		return from // find_best_ips_proto's fast path
	}
	// union nf_inet_addr: four 32-bit words, the address's bytes read in
	// host order; an IPv4 address fills the first, the rest stay zero.
	var key [4]uint32
	c := client.As16()
	words := 4
	if client.Is4() {
		a := client.As4()
		c = [16]byte{}
		copy(c[:], a[:])
		words = 1
	}
	for i := range key {
		key[i] = binary.NativeEndian.Uint32(c[4*i:])
	}
	j := jhash2(key[:], 0)
	lo, hi := addrWords(from, words), addrWords(to, words)
	out := make([]byte, 0, 4*words)
	fullRange := false
	for i := range words {
		minIP, dist := lo[i], hi[i]-lo[i]+1
		if fullRange {
			minIP, dist = 0, ^uint32(0)
		}
		w := minIP + uint32(uint64(j)*uint64(dist)>>32) // reciprocal_scale
		if w != hi[i] {
			fullRange = true // the lower words may take any value
		}
		out = binary.BigEndian.AppendUint32(out, w)
	}
	a, _ := netip.AddrFromSlice(out)
	return a
}

// addrWords returns the address as 32-bit words in host order (ntohl).
func addrWords(a netip.Addr, n int) []uint32 {
	b := a.AsSlice()
	w := make([]uint32, n)
	for i := range w {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}

// jhash2 is the kernel's jhash2 (include/linux/jhash.h, Bob Jenkins'
// lookup3) over 32-bit words.
func jhash2(k []uint32, initval uint32) uint32 {
	a := 0xdeadbeef + uint32(len(k))<<2 + initval
	b, c := a, a
	for ; len(k) > 3; k = k[3:] {
		a += k[0]
		b += k[1]
		c += k[2]
		a -= c
		a ^= bits.RotateLeft32(c, 4)
		c += b
		b -= a
		b ^= bits.RotateLeft32(a, 6)
		a += c
		c -= b
		c ^= bits.RotateLeft32(b, 8)
		b += a
		a -= c
		a ^= bits.RotateLeft32(c, 16)
		c += b
		b -= a
		b ^= bits.RotateLeft32(a, 19)
		a += c
		c -= b
		c ^= bits.RotateLeft32(b, 4)
		b += a
	}
	switch len(k) {
	case 3:
		c += k[2]
		fallthrough
	case 2:
		b += k[1]
		fallthrough
	case 1:
		a += k[0]
		c ^= b
		c -= bits.RotateLeft32(b, 14)
		a ^= c
		a -= bits.RotateLeft32(c, 11)
		b ^= a
		b -= bits.RotateLeft32(a, 25)
		c ^= b
		c -= bits.RotateLeft32(b, 16)
		a ^= c
		a -= bits.RotateLeft32(c, 4)
		b ^= a
		b -= bits.RotateLeft32(a, 14)
		c ^= b
		c -= bits.RotateLeft32(b, 24)
	}
	return c
}
