package connsync

import (
	"bytes"
	"hash/maphash"
)

// The cache finds a connection's slot through an open-addressing hash
// table of slot numbers: the key is not stored again but compared against
// the record in the slab. The table is Robin Hood hashed: each position
// keeps how far its slot sits from its home position, which bounds a
// search to the slots of the same home (under one on average) and lets a
// removal shift the following slots back without hashing them again.
// The seed is random, so that clients choosing their addresses and ports
// cannot pile their connections onto one home.

const (
	// maxLoad is the share of the table's positions in use at most, in
	// tenths: Robin Hood hashing keeps searches short up to 90 %.
	maxLoad = 9
	// minTableLen is the table's length when it is first needed.
	minTableLen = 16
)

// index is the hash table of slot numbers.
type index struct {
	seed  maphash.Seed
	slots []uint32
	// dist is 0 at an empty position, else 1 + the position's distance
	// from its slot's home; a slot never sits 255 or more from home (the
	// table grows instead).
	dist []uint8
}

// keyOf writes the fields that identify r's connection (connKey) to b
// and returns them, and r's persistence engine data, if any.
func keyOf(r rec, b *[38]byte) (fixed, pe []byte) {
	n := r.addrLen()
	k := copy(b[:], r[offAddrs:offAddrs+2*n])
	k += copy(b[k:], r[offCport:offCport+4]) // cport, vport
	b[k] = r.protocol()
	b[k+1] = r[0] & stypeInet6
	if r.flags()&connFTemplate != 0 {
		b[k+1] |= 2
	}
	return b[:k+2], peData(r)
}

// peData returns r's persistence engine data, nil if it has none.
func peData(r rec) []byte {
	for p := offAddrs + 3*r.addrLen(); p+2 <= len(r); p += 2 + int(r[p+1]) {
		if r[p]&^optFParam == optPEData {
			return r[p+2 : p+2+int(r[p+1])]
		}
	}
	return nil
}

// sameConn reports whether a and b are records of one connection: their
// keys (connKey) are equal.
func sameConn(a, b rec) bool {
	n := a.addrLen()
	return a[0] == b[0] && a.protocol() == b.protocol() &&
		(a.flags()^b.flags())&connFTemplate == 0 &&
		bytes.Equal(a[offCport:offCport+4], b[offCport:offCport+4]) &&
		bytes.Equal(a[offAddrs:offAddrs+2*n], b[offAddrs:offAddrs+2*n]) &&
		bytes.Equal(peData(a), peData(b))
}

func (x *index) hash(r rec) uint64 {
	var b [38]byte
	fixed, pe := keyOf(r, &b)
	if pe == nil {
		return maphash.Bytes(x.seed, fixed)
	}
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.Write(fixed)
	h.Write(pe)
	return h.Sum64()
}

// home is the position a hash starts its search at.
func (x *index) home(h uint64) int {
	return int((h >> 32) * uint64(len(x.slots)) >> 32)
}

// find returns the slot of r's connection, or noSlot.
func (c *cache) find(r rec, h uint64) uint32 {
	x := &c.index
	if len(x.slots) == 0 {
		return noSlot
	}
	i := x.home(h)
	for d := 1; int(x.dist[i]) >= d; d++ {
		if int(x.dist[i]) == d && sameConn(c.record(x.slots[i]), r) {
			return x.slots[i]
		}
		if i++; i == len(x.slots) {
			i = 0
		}
	}
	return noSlot
}

// insert adds slot, whose record is in place and whose connection is not
// in the table, hashed h.
func (c *cache) insert(slot uint32, h uint64) {
	x := &c.index
	if c.count*10 > len(x.slots)*maxLoad {
		c.rebuild(c.grownLen()) // takes slot in from the slab
		return
	}
	if !x.place(slot, h) {
		c.rebuild(c.grownLen())
	}
}

// place puts slot in at its home or after, moving slots nearer to their
// home on (Robin Hood). It reports false, with a slot left out, if one
// would end 255 or more positions from home.
func (x *index) place(slot uint32, h uint64) bool {
	i := x.home(h)
	for d := 1; d < 256; d++ {
		switch {
		case x.dist[i] == 0:
			x.slots[i], x.dist[i] = slot, uint8(d)
			return true
		case int(x.dist[i]) < d:
			x.slots[i], slot = slot, x.slots[i]
			d2 := int(x.dist[i])
			x.dist[i] = uint8(d)
			d = d2
		}
		if i++; i == len(x.slots) {
			i = 0
		}
	}
	return false
}

// delete takes slot, hashed h, out of the table, shifting the slots after
// it that are not at home one position back, and shrinks a table that is
// mostly empty. The slot must be released and counted out already.
func (c *cache) delete(slot uint32, h uint64) {
	x := &c.index
	i := x.home(h)
	for d := 1; x.slots[i] != slot || x.dist[i] == 0; d++ {
		if d == 256 {
			panic("connsync: a cached slot is not in the index")
		}
		if i++; i == len(x.slots) {
			i = 0
		}
	}
	for {
		j := i + 1
		if j == len(x.slots) {
			j = 0
		}
		if x.dist[j] <= 1 {
			x.dist[i] = 0
			break
		}
		x.slots[i], x.dist[i] = x.slots[j], x.dist[j]-1
		i = j
	}
	if len(x.slots) > minTableLen && c.count*5 < len(x.slots) {
		c.rebuild(c.count * 10 / 6) // at 60 % again
	}
}

// grownLen is the table's next length: half as long again, but no longer
// than the cache's bound needs.
func (c *cache) grownLen() int {
	n := max(minTableLen, len(c.index.slots)*3/2)
	return min(n, c.max*10/maxLoad+1)
}

// rebuild makes a table of at least n positions and fills it with every
// slot in use, walking the slabs in memory order. count must already
// include a slot being inserted.
func (c *cache) rebuild(n int) {
	n = max(n, minTableLen, c.count*10/maxLoad+1)
	for {
		x := &c.index
		x.slots, x.dist = make([]uint32, n), make([]uint8, n)
		if c.fillIndex() {
			return
		}
		n = n * 3 / 2 // a slot ended too far from home: improbable, but bounded
	}
}

func (c *cache) fillIndex() bool {
	for cls := range c.slabs {
		s := &c.slabs[cls]
		for i := range s.used {
			slot := uint32(cls)<<indexBits | i
			if c.meta(slot).gen&1 == 0 {
				continue
			}
			if !c.index.place(slot, c.index.hash(c.record(slot))) {
				return false
			}
		}
	}
	return true
}
