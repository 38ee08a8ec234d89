// Package maglev reproduces the choice of the kernel's IPVS Maglev scheduler
// (ip_vs_mh) for a new flow, from the service's destinations in the
// kernel's list order: which destination a client gets, and why. It is
// pure computation; the caller reads the destination list from the kernel.
//
// The kernel builds a lookup table of TableSize slots. Every destination
// with a weight has a permutation of the slots (an offset and a skip, both
// hashes of its address and port) and takes, round after round and in list
// order, its next free slots: as many per round as its weight divided by
// the weights' greatest common divisor (shifted down when that exceeds
// 6 bits). A flow hashes its client address (and source port with mh-port)
// to a slot. The weight used to build the table is the destination's last
// non-zero one: a destination set to weight 0 keeps its slots, and with
// mh-fallback its flows are rehashed along the table to the next available
// destination.
package maglev

import (
	"math/bits"
	"net/netip"
	"slices"
)

// TableSize is the number of slots: the kernel's default table index 12
// (CONFIG_IP_VS_MH_TAB_INDEX), which Debian's kernels use.
const TableSize = 4093

// weightBits caps a destination's slots per round (IP_VS_MH_TAB_BITS).
const weightBits = 6

// The hash keys are fixed in the kernel, so that every director with the
// same destinations builds the same table.
var (
	key1 = [2]uint64{2654435761, 2654435761}
	key2 = [2]uint64{2654446892, 2654446892}
)

// Destination is one destination of an IPVS service as the scheduler sees it.
type Destination struct {
	Addr netip.Addr
	Port uint16
	// LastWeight is the last non-zero weight the destination had (the
	// weight it was added with when that was 0): it decides its slots.
	LastWeight int
	// Weight is its weight now; at 0, or Overloaded (at its upper
	// connection threshold), it takes no new flows.
	Weight     int
	Overloaded bool
}

// Available reports whether d takes new flows.
func (d Destination) Available() bool { return d.Weight > 0 && !d.Overloaded }

// Table is the lookup table of one service.
type Table struct {
	dests []Destination
	slots []int16 // index into dests; -1: empty (no destination has a weight)
}

// New builds the table of a service whose destinations are dests, in the
// kernel's list order (the order a netlink dump or ipvsadm -Ln shows them).
func New(dests []Destination) *Table {
	t := &Table{dests: slices.Clone(dests), slots: make([]int16, TableSize)}
	for i := range t.slots {
		t.slots[i] = -1
	}
	g, maxWeight := 0, 0
	for _, d := range dests {
		if d.LastWeight > 0 {
			g = gcd(g, d.LastWeight)
			maxWeight = max(maxWeight, d.LastWeight)
		}
	}
	if g == 0 {
		return t
	}
	shift := max(bits.Len(uint(maxWeight/g))-weightBits, 0)
	type setup struct{ perm, skip, turns int }
	perms := make([]setup, len(dests))
	for i, d := range dests {
		perms[i].perm = int(hashKey(d.Addr, d.Port, key1, 0) % TableSize)
		perms[i].skip = int(hashKey(d.Addr, d.Port, key2, 0)%(TableSize-1)) + 1
		perms[i].turns = (d.LastWeight / g) >> shift
		if perms[i].turns == 0 && d.LastWeight > 0 {
			perms[i].turns = 1
		}
	}
	taken := make([]bool, TableSize)
	filled, turn := 0, 0
	for filled < TableSize {
		// One round: each destination takes its turns, in list order.
		for i := 0; i < len(dests); {
			s := &perms[i]
			if s.turns < 1 {
				i++
				continue
			}
			for taken[s.perm] {
				s.perm += s.skip
				if s.perm >= TableSize {
					s.perm -= TableSize
				}
			}
			taken[s.perm] = true
			t.slots[s.perm] = int16(i)
			if filled++; filled == TableSize {
				return t
			}
			if turn++; turn >= s.turns {
				turn = 0
				i++
			}
		}
	}
	return t
}

// Choice is the scheduler's answer for one flow.
type Choice struct {
	Slot     int // the flow's slot
	Owner    int // index of the destination holding the slot; -1: none
	Dest     int // index of the chosen destination; -1: the flow is dropped
	Rehashed int // lookups past the first one (mh-fallback); 0: the slot's owner
}

// Pick returns the destination a new flow from client gets. port is the
// client's source port when the service hashes it (mh-port), else 0;
// fallback is mh-fallback.
func (t *Table) Pick(client netip.Addr, port uint16, fallback bool) Choice {
	first := int(hashKey(client, port, key1, 0) % TableSize)
	c := Choice{Slot: first, Owner: int(t.slots[first]), Dest: -1}
	if c.Owner < 0 || t.dests[c.Owner].Available() {
		c.Dest = c.Owner
		return c
	}
	if !fallback {
		return c
	}
	for offset := range TableSize {
		slot := hashKey(client, port, key1, uint32((offset+first)%TableSize)) % TableSize
		owner := int(t.slots[slot])
		c.Rehashed = offset + 1
		if owner < 0 {
			return c
		}
		if t.dests[owner].Available() {
			c.Dest = owner
			return c
		}
	}
	return c
}

// Slots returns how many slots each destination holds, by index.
func (t *Table) Slots() []int {
	n := make([]int, len(t.dests))
	for _, s := range t.slots {
		if s >= 0 {
			n[s]++
		}
	}
	return n
}

// hashKey is the kernel's ip_vs_mh_hashkey: offset plus port plus the
// address (an IPv6 one folded to 32 bits by XOR), through hsiphash.
func hashKey(addr netip.Addr, port uint16, key [2]uint64, offset uint32) uint32 {
	var fold uint32
	if addr.Is4() || addr.Is4In6() {
		a := addr.Unmap().As4()
		fold = be32(a[:])
	} else {
		a := addr.As16()
		fold = be32(a[0:4]) ^ be32(a[4:8]) ^ be32(a[8:12]) ^ be32(a[12:16])
	}
	return hsiphash32(offset+uint32(port)+fold, key)
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
