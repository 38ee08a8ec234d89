package connsync

import (
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
type cache struct {
	max        int
	defTimeout time.Duration // for records with timeout 0
	m          map[connKey]*entry
	head, tail *entry
	cursors    map[*cursor]struct{}
}

// entry does not keep its key, which is a fifth of its size: removal
// derives it from rec again.
type entry struct {
	rec        rec
	deadline   time.Duration // on the relay's monotonic clock
	prev, next *entry
}

// cursor walks the cache from oldest to newest. An entry updated while a
// cursor walks moves to the end and is visited again; entries added after
// the cursor has reached the end are not.
type cursor struct{ next *entry }

func newCache(max int, defTimeout time.Duration) *cache {
	return &cache{max: max, defTimeout: defTimeout, m: make(map[connKey]*entry), cursors: make(map[*cursor]struct{})}
}

func (c *cache) len() int { return len(c.m) }

// put records r (copied) as received at now, returns its entry and reports
// whether the oldest entry was evicted to make room.
func (c *cache) put(r rec, now time.Duration) (e *entry, evicted bool) {
	life := time.Duration(r.timeout()) * time.Second
	if life == 0 {
		life = c.defTimeout
	}
	k := r.key()
	e = c.m[k]
	if e != nil {
		c.unlink(e)
	} else {
		if len(c.m) >= c.max {
			c.remove(c.head)
			evicted = true
		}
		e = &entry{}
		c.m[k] = e
	}
	e.rec = append(e.rec[:0], r...)
	e.deadline = now + life
	c.pushBack(e)
	return e, evicted
}

// holds reports whether e is still the cache's entry of its connection and
// has not expired at now.
func (c *cache) holds(e *entry, now time.Duration) bool {
	return e.deadline > now && c.m[e.rec.key()] == e
}

// newCursor starts a walk at the oldest entry.
func (c *cache) newCursor() *cursor {
	cur := &cursor{next: c.head}
	c.cursors[cur] = struct{}{}
	return cur
}

func (c *cache) closeCursor(cur *cursor) { delete(c.cursors, cur) }

// peek returns the cursor's next live entry without moving past it, or nil
// at the end, removing the expired entries in the way and counting them.
func (c *cache) peek(cur *cursor, now time.Duration) (e *entry, expired int) {
	for cur.next != nil && cur.next.deadline <= now {
		c.remove(cur.next) // moves cur.next on
		expired++
	}
	return cur.next, expired
}

// advance moves the cursor past the entry peek returned.
func (cur *cursor) advance() { cur.next = cur.next.next }

// removeIf removes the records drop reports true for and returns how many.
func (c *cache) removeIf(drop func(rec) bool) int {
	n := 0
	for e := c.head; e != nil; {
		next := e.next
		if drop(e.rec) {
			c.remove(e)
			n++
		}
		e = next
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

func (c *cache) remove(e *entry) {
	c.unlink(e)
	delete(c.m, e.rec.key())
}

// unlink takes e out of the list, moving any cursor that would visit it
// next to its successor.
func (c *cache) unlink(e *entry) {
	for cur := range c.cursors {
		if cur.next == e {
			cur.next = e.next
		}
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *cache) pushBack(e *entry) {
	e.prev = c.tail
	if c.tail != nil {
		c.tail.next = e
	} else {
		c.head = e
	}
	c.tail = e
}
