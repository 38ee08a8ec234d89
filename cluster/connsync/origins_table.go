package connsync

import "hash/maphash"

// The origins of up to a million connections must not cost a director
// hundreds of megabytes (as a Go map of connKey they took 115 bytes each,
// 176 in a full table), so they live in two open-addressing hash tables of
// fixed-size slots, one per address family: a slot holds the connection's
// key, its origin as an index into a table of names, and its deadline in
// whole seconds; 20 bytes for IPv4, 44 for IPv6. Like the cache's index
// (cache_index.go) the tables are Robin Hood hashed with a random seed:
// each slot keeps how far it sits from its home position, which bounds a
// search and lets a removal shift the following slots back.

// originKey4 and originKey6 identify a NAT connection as connKey does; a
// template is never a NAT connection's (masquerade) and a connection
// carries no persistence data (the kernel sends it with templates only),
// so the family, addresses, ports and protocol are the whole key.
type originKey4 struct {
	addrs [8]byte // caddr, vaddr
	ports [4]byte // cport, vport
	proto uint8
}

type originKey6 struct {
	addrs [32]byte
	ports [4]byte
	proto uint8
}

func originKey4Of(r rec) (k originKey4) {
	copy(k.addrs[:], r[offAddrs:])
	copy(k.ports[:], r[offCport:])
	k.proto = r.protocol()
	return k
}

func originKey6Of(r rec) (k originKey6) {
	copy(k.addrs[:], r[offAddrs:])
	copy(k.ports[:], r[offCport:])
	k.proto = r.protocol()
	return k
}

// originSlot is a position of an originTable.
type originSlot[K comparable] struct {
	key K
	// dist is 0 at an empty position, else 1 + the slot's distance from its
	// home; never 256 or more (the table grows instead).
	dist uint8
	name uint8 // in originNames
	// deadline is when the origin is forgotten, in whole seconds on the
	// engine's clock, rounded up.
	deadline uint32
}

// originTable is the Robin Hood hash table of one address family's slots.
type originTable[K comparable] struct {
	seed  maphash.Seed
	slots []originSlot[K]
	count int
}

func (t *originTable[K]) hash(k K) uint64 { return maphash.Comparable(t.seed, k) }

// home is the position a hash starts its search at.
func (t *originTable[K]) home(h uint64) int {
	return int((h >> 32) * uint64(len(t.slots)) >> 32)
}

// find returns the position of k's slot, -1 if it has none.
func (t *originTable[K]) find(k K, h uint64) int {
	if len(t.slots) == 0 {
		return -1
	}
	i := t.home(h)
	for d := 1; int(t.slots[i].dist) >= d; d++ {
		if int(t.slots[i].dist) == d && t.slots[i].key == k {
			return i
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return -1
}

// add puts s in, whose key is not in the table, growing it to stay at
// most maxLoad full; limit is the most slots the table is to hold.
func (t *originTable[K]) add(s originSlot[K], h uint64, limit int) {
	t.count++
	if t.count*10 > len(t.slots)*maxLoad {
		t.resize(t.grownLen(limit), s)
		return
	}
	if left, ok := t.place(s, h); !ok {
		t.resize(t.grownLen(limit), left)
	}
}

// place puts s in at its home or after, moving slots nearer to their home
// on (Robin Hood). It reports false, with the slot it left out, if one
// would end 255 or more positions from home.
func (t *originTable[K]) place(s originSlot[K], h uint64) (originSlot[K], bool) {
	i := t.home(h)
	for d := 1; d < 256; d++ {
		switch at := &t.slots[i]; {
		case at.dist == 0:
			s.dist = uint8(d)
			*at = s
			return s, true
		case int(at.dist) < d:
			s.dist = uint8(d)
			*at, s = s, *at
			d = int(s.dist)
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return s, false
}

// grownLen is the table's next length: half as long again, but no longer
// than limit slots need.
func (t *originTable[K]) grownLen(limit int) int {
	n := max(minTableLen, len(t.slots)*3/2)
	return min(n, limit*10/maxLoad+1)
}

// resize moves the slots to a table of at least n positions, and extra
// ones not in the table yet with them.
func (t *originTable[K]) resize(n int, extra ...originSlot[K]) {
	old := t.slots
	n = max(n, minTableLen, t.count*10/maxLoad+1)
	for !t.refill(n, old, extra) {
		n = n * 3 / 2 // a slot ended too far from home: improbable, but bounded
	}
}

func (t *originTable[K]) refill(n int, old, extra []originSlot[K]) bool {
	t.slots = make([]originSlot[K], n)
	for _, s := range old {
		if s.dist == 0 {
			continue // empty
		}
		if _, ok := t.place(s, t.hash(s.key)); !ok {
			return false
		}
	}
	for _, s := range extra {
		if _, ok := t.place(s, t.hash(s.key)); !ok {
			return false
		}
	}
	return true
}

// removeAt empties position i, shifting the slots after it that are not
// at home one position back.
func (t *originTable[K]) removeAt(i int) {
	for {
		j := i + 1
		if j == len(t.slots) {
			j = 0
		}
		if t.slots[j].dist <= 1 {
			t.slots[i] = originSlot[K]{}
			break
		}
		t.slots[i] = t.slots[j]
		t.slots[i].dist--
		i = j
	}
	t.count--
}

// removeIf removes the slots drop reports true for, then shrinks a table
// that is mostly empty.
func (t *originTable[K]) removeIf(drop func(*originSlot[K]) bool) {
	for i := 0; i < len(t.slots); {
		// A removal shifts the next slot into i: look at i again. A slot
		// that wraps round from the start to the end was looked at.
		if s := &t.slots[i]; s.dist != 0 && drop(s) {
			t.removeAt(i)
			continue
		}
		i++
	}
	if len(t.slots) > minTableLen && t.count*5 < len(t.slots) {
		t.resize(t.count * 10 / 6) // at 60 % again
	}
}
