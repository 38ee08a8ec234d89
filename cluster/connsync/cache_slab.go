package connsync

import (
	"encoding/binary"
	"math/bits"
)

// The cache keeps its records in slabs rather than in an object per
// connection: as a heap object with pointers and a map entry, a 36-byte
// IPv4 record cost 190 bytes, and the garbage collector scanned them all.
//
// Records vary in length (options follow the fixed part), so each slab
// holds one size class of fixed-size slots; a record that grows out of its
// class moves to another slot. A slot is named by a uint32: its class in
// the top bits, its index in the class below. Slabs grow a chunk at a time,
// so an idle director holds next to nothing, and give their chunks back but
// the first when their last record goes (slots are not moved to make a
// slab smaller: references to them would go stale).

// slotClasses are the slot sizes: the IPv4 record (36 bytes), the IPv4
// record with an origin (origins.go) or sequence option, the IPv6 record,
// and larger ones up to maxRecordLen for records with persistence data.
var slotClasses = [...]int{recLenV4, 48, 64, recLenV6, 96, 128, 192, 256, 384, 512, 768, maxRecordLen}

// The classes fit in a slot number's classBits (a compile-time check).
var _ [1<<classBits - len(slotClasses)]struct{}

const (
	classBits  = 4
	indexBits  = 32 - classBits
	indexMask  = 1<<indexBits - 1
	noSlot     = ^uint32(0) // the end of a list; never handed out
	maxPerSlab = indexMask  // slots of one class: noSlot's index is never reached
	// chunkBytes is the least a chunk of a class's records takes.
	chunkBytes = 64 << 10
	// pageBytes is what the Go allocator rounds a large object up to a
	// multiple of: a chunk of 1024 IPv4 records (36 KiB) would waste 11 %.
	pageBytes = 8 << 10
)

// slotMeta is what the cache keeps of a slot besides the record.
type slotMeta struct {
	prev, next uint32 // in update order; next links free slots too
	// deadline is when the record expires, in whole seconds on the relay's
	// monotonic clock, rounded up: a record may outlive its timeout by
	// less than a second.
	deadline uint32
	// gen counts the slot's uses, odd while it holds a record, so that a
	// reference kept across changes (entryRef) sees the slot was freed or
	// reused.
	gen uint32
}

// slab is the slots of one size class.
type slab struct {
	size   int  // bytes of a slot
	shift  uint // slots per chunk: 1 << shift
	recs   [][]byte
	meta   [][]slotMeta
	used   uint32 // slots handed out since the last trim: the high-water mark
	free   uint32 // first free slot's index, linked by next; noSlot: none
	inUse  int
	maxGen uint32 // the highest generation handed out
	// genFloor is the generation a new chunk's slots start from: above
	// every one handed out before a trim, so that a reference to a slot of
	// a chunk given back does not match a new record in it.
	genFloor uint32
}

func newSlabs() []slab {
	s := make([]slab, len(slotClasses))
	for i, size := range slotClasses {
		s[i] = slab{size: size, shift: chunkShift(size), free: noSlot}
	}
	return s
}

// chunkShift returns log2 of the slots in a chunk of size-byte slots: at
// least chunkBytes, and more while the allocator would round the chunk up
// by more than a sixteenth (up to 1 MiB).
func chunkShift(size int) uint {
	shift := uint(bits.Len(uint((chunkBytes - 1) / size)))
	for {
		n := size << shift
		if waste := (pageBytes - n%pageBytes) % pageBytes; waste*16 <= n || n >= 1<<20 {
			return shift
		}
		shift++
	}
}

// classOf returns the class of the smallest slots that hold n bytes.
func classOf(n int) uint32 {
	for i, size := range slotClasses {
		if n <= size {
			return uint32(i)
		}
	}
	panic("connsync: record longer than maxRecordLen")
}

func slotClass(slot uint32) uint32 { return slot >> indexBits }

// meta returns the metadata of a slot handed out before.
func (c *cache) meta(slot uint32) *slotMeta {
	s := &c.slabs[slot>>indexBits]
	i := slot & indexMask
	return &s.meta[i>>s.shift][i&(1<<s.shift-1)]
}

// slotBytes returns a slot's whole room.
func (c *cache) slotBytes(slot uint32) []byte {
	s := &c.slabs[slot>>indexBits]
	i := slot & indexMask
	off := int(i&(1<<s.shift-1)) * s.size
	return s.recs[i>>s.shift][off : off+s.size : off+s.size]
}

// record returns the record in a slot that holds one. It aliases the slab:
// valid until the cache changes.
func (c *cache) record(slot uint32) rec {
	b := c.slotBytes(slot)
	// A record's header states its size (parseRecords checked it).
	n := int(binary.BigEndian.Uint16(b[offVerSize:]) & sverMask)
	return rec(b[:n:n])
}

// alloc hands out a free slot of class cls, its generation odd.
func (c *cache) alloc(cls uint32) uint32 {
	s := &c.slabs[cls]
	var i uint32
	if s.free != noSlot {
		i = s.free
		s.free = c.meta(cls<<indexBits | i).next
	} else {
		if s.used == maxPerSlab {
			panic("connsync: slab full") // newCache keeps max below
		}
		i = s.used
		s.used++
		if int(i>>s.shift) == len(s.recs) {
			s.recs = append(s.recs, make([]byte, s.size<<s.shift))
			meta := make([]slotMeta, 1<<s.shift)
			for j := range meta {
				meta[j].gen = s.genFloor
			}
			s.meta = append(s.meta, meta)
		}
	}
	slot := cls<<indexBits | i
	m := c.meta(slot)
	m.gen++
	s.maxGen = max(s.maxGen, m.gen)
	s.inUse++
	return slot
}

// release returns a slot to its class's free list, its generation even.
func (c *cache) release(slot uint32) {
	s := &c.slabs[slot>>indexBits]
	m := c.meta(slot)
	m.gen++
	m.prev, m.next = noSlot, s.free
	s.free = slot & indexMask
	s.inUse--
	if s.inUse == 0 && len(s.recs) > 1 {
		s.trim()
	}
}

// trim gives back every chunk but the first of an empty slab.
func (s *slab) trim() {
	s.genFloor = s.maxGen + 1 // even: free
	clear(s.recs[1:])
	clear(s.meta[1:])
	s.recs, s.meta = s.recs[:1:1], s.meta[:1:1]
	s.used = min(s.used, 1<<s.shift)
	s.free = noSlot
	for i := int(s.used) - 1; i >= 0; i-- {
		s.meta[0][i].next = s.free
		s.free = uint32(i)
	}
}

// handedOut reports whether slot is one the slab has now, free or not.
func (c *cache) handedOut(slot uint32) bool {
	cls := slot >> indexBits
	return int(cls) < len(c.slabs) && slot&indexMask < c.slabs[cls].used
}
