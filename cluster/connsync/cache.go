package connsync

import (
	"hash/maphash"
	"math"
	"net/netip"
	"time"
)

// cache holds the latest record of each connection the local master daemon
// reported, until the record's timeout has passed since it arrived. The
// kernel sends a connection again only when packets flow, so the cache is
// what an idle connection is replayed from.
//
// Entries form a list in order of their last update; the oldest is evicted
// when the cache is full. Replays walk the list with cursors, a few
// messages at a time, so a cursor must survive entries being updated,
// evicted and expired under it. Expired entries are removed when a cursor
// reaches them, so the periodic full replay bounds their stay.
//
// A cache of a million connections must not cost every director hundreds
// of megabytes, so an entry is its record in a slab slot (cache_slab.go),
// 16 bytes of links, deadline and generation beside it, and a position
// in the hash table (cache_index.go): about 60 bytes for an IPv4
// connection (BenchmarkCacheBytes).
type cache struct {
	max        int
	defTimeout time.Duration // for records with timeout 0
	count      int
	slabs      []slab
	index      index
	head, tail uint32 // slots; noSlot: none
	cursors    map[*cursor]struct{}
}

// entryRef names a cache entry, and stays valid to keep across changes of
// the cache: holds tells whether the entry is still there. The zero
// entryRef names none.
type entryRef struct {
	slot uint32
	gen  uint32 // the slot's generation when the entry took it: odd
}

func (r entryRef) ok() bool { return r.gen&1 == 1 }

// cursor walks the cache from oldest to newest. An entry updated while a
// cursor walks moves to the end and is visited again; entries added after
// the cursor has reached the end are not.
type cursor struct {
	c    *cache
	next uint32 // noSlot at the end
}

func newCache(max int, defTimeout time.Duration) *cache {
	return &cache{
		max:        min(max, maxPerSlab),
		defTimeout: defTimeout,
		slabs:      newSlabs(),
		index:      index{seed: maphash.MakeSeed()},
		head:       noSlot, tail: noSlot,
		cursors: make(map[*cursor]struct{}),
	}
}

func (c *cache) len() int { return c.count }

// put records r (copied) as received at now, returns its entry and reports
// whether the oldest entry was evicted to make room.
func (c *cache) put(r rec, now time.Duration) (e entryRef, evicted bool) {
	life := time.Duration(r.timeout()) * time.Second
	if life == 0 {
		life = c.defTimeout
	}
	h := c.index.hash(r)
	cls := classOf(len(r))
	slot := c.find(r, h)
	if slot != noSlot && slotClass(slot) != cls {
		c.removeHashed(slot, h) // it moves to a slot of its new size
		slot = noSlot
	}
	fresh := slot == noSlot
	if fresh {
		if c.count >= c.max && c.head != noSlot {
			c.remove(c.head)
			evicted = true
		}
		slot = c.alloc(cls)
		c.count++
	} else {
		c.unlink(slot)
	}
	copy(c.slotBytes(slot), r)
	m := c.meta(slot)
	m.deadline = deadlineAt(now + life)
	if fresh {
		c.insert(slot, h)
	}
	c.pushBack(slot)
	return entryRef{slot: slot, gen: m.gen}, evicted
}

// deadlineAt is t in whole seconds, rounded up: a relay runs for less than
// 136 years, and a later deadline is as good as never.
func deadlineAt(t time.Duration) uint32 {
	return uint32(min((t+time.Second-1)/time.Second, math.MaxUint32))
}

// rec returns the record of a live entry; it aliases the cache's memory and
// is valid until the cache changes.
func (c *cache) rec(e entryRef) rec { return c.record(e.slot) }

// deadline returns when a live entry expires, on the relay's monotonic
// clock.
func (c *cache) deadline(e entryRef) time.Duration {
	return time.Duration(c.meta(e.slot).deadline) * time.Second
}

// holds reports whether e is still the cache's entry of its connection and
// has not expired at now.
func (c *cache) holds(e entryRef, now time.Duration) bool {
	if !e.ok() || !c.handedOut(e.slot) {
		return false
	}
	m := c.meta(e.slot)
	return m.gen == e.gen && time.Duration(m.deadline)*time.Second > now
}

// newCursor starts a walk at the oldest entry.
func (c *cache) newCursor() *cursor {
	cur := &cursor{c: c, next: c.head}
	c.cursors[cur] = struct{}{}
	return cur
}

func (c *cache) closeCursor(cur *cursor) { delete(c.cursors, cur) }

// peek returns the cursor's next live entry without moving past it, or the
// zero entryRef at the end, removing the expired entries in the way and
// counting them.
func (c *cache) peek(cur *cursor, now time.Duration) (e entryRef, expired int) {
	for cur.next != noSlot && time.Duration(c.meta(cur.next).deadline)*time.Second <= now {
		c.remove(cur.next) // moves cur.next on
		expired++
	}
	if cur.next == noSlot {
		return entryRef{}, expired
	}
	return entryRef{slot: cur.next, gen: c.meta(cur.next).gen}, expired
}

// advance moves the cursor past the entry peek returned.
func (cur *cursor) advance() { cur.next = cur.c.meta(cur.next).next }

// removeIf removes the records drop reports true for and returns how many.
func (c *cache) removeIf(drop func(rec) bool) int {
	n := 0
	for s := c.head; s != noSlot; {
		next := c.meta(s).next
		if drop(c.record(s)) {
			c.remove(s)
			n++
		}
		s = next
	}
	return n
}

// releaseVIP removes the connections to vip and returns how many.
func (c *cache) releaseVIP(vip netip.Addr) int {
	return c.removeIf(func(r rec) bool { return r.vaddr() == vip })
}

// forgetDests removes the connections to vip that go to one of dests (a
// port 0 matches any port) and returns how many.
func (c *cache) forgetDests(vip netip.Addr, dests []netip.AddrPort) int {
	return c.removeIf(func(r rec) bool {
		if r.vaddr() != vip {
			return false
		}
		d := r.dest()
		for _, x := range dests {
			if d.Addr() == x.Addr() && (x.Port() == 0 || d.Port() == x.Port()) {
				return true
			}
		}
		return false
	})
}

func (c *cache) remove(slot uint32) { c.removeHashed(slot, c.index.hash(c.record(slot))) }

// removeHashed removes the entry in slot, whose record hashes to h.
func (c *cache) removeHashed(slot uint32, h uint64) {
	c.unlink(slot)
	c.release(slot)
	c.count--
	c.delete(slot, h)
}

// unlink takes slot out of the list, moving any cursor that would visit it
// next to its successor.
func (c *cache) unlink(slot uint32) {
	m := c.meta(slot)
	for cur := range c.cursors {
		if cur.next == slot {
			cur.next = m.next
		}
	}
	if m.prev != noSlot {
		c.meta(m.prev).next = m.next
	} else {
		c.head = m.next
	}
	if m.next != noSlot {
		c.meta(m.next).prev = m.prev
	} else {
		c.tail = m.prev
	}
	m.prev, m.next = noSlot, noSlot
}

func (c *cache) pushBack(slot uint32) {
	m := c.meta(slot)
	m.prev, m.next = c.tail, noSlot
	if c.tail != noSlot {
		c.meta(c.tail).next = slot
	} else {
		c.head = slot
	}
	c.tail = slot
}
