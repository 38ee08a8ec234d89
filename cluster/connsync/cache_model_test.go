package connsync

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// cacheModel is what the cache must behave like: a list of the latest
// record of each connection in update order, as the cache was before its
// records moved into slabs.
type cacheModel struct {
	max     int
	entries []modelEntry // oldest first
	nextID  int
}

type modelEntry struct {
	key      connKey
	rec      []byte
	deadline time.Duration
	id       int // the entry: kept by an update that fits its slot
	ref      entryRef
}

func (m *cacheModel) find(k connKey) int {
	return slices.IndexFunc(m.entries, func(e modelEntry) bool { return e.key == k })
}

// put mirrors cache.put; an update whose record needs a slot of another
// size is a new entry (its old references no longer hold).
func (m *cacheModel) put(r rec, now time.Duration, ref entryRef, evicted bool, defTimeout time.Duration) (wantEvicted bool, id int) {
	life := time.Duration(r.timeout()) * time.Second
	if life == 0 {
		life = defTimeout
	}
	e := modelEntry{key: r.key(), rec: bytes.Clone(r), deadline: time.Duration(deadlineAt(now+life)) * time.Second, ref: ref}
	if i := m.find(e.key); i >= 0 {
		old := m.entries[i]
		m.entries = slices.Delete(m.entries, i, i+1)
		if classOf(len(old.rec)) == classOf(len(r)) {
			e.id = old.id
		}
	}
	if e.id == 0 {
		if len(m.entries) >= m.max {
			m.entries = m.entries[1:]
			wantEvicted = true
		}
		m.nextID++
		e.id = m.nextID
	}
	m.entries = append(m.entries, e)
	return wantEvicted, e.id
}

// expire removes what a cursor walking the whole cache at now removes.
func (m *cacheModel) expire(now time.Duration) int {
	n := len(m.entries)
	m.entries = slices.DeleteFunc(m.entries, func(e modelEntry) bool { return e.deadline <= now })
	return n - len(m.entries)
}

func (m *cacheModel) removeIf(drop func(rec) bool) int {
	n := len(m.entries)
	m.entries = slices.DeleteFunc(m.entries, func(e modelEntry) bool { return drop(e.rec) })
	return n - len(m.entries)
}

// checkCache compares c with m: the list, each connection's lookup, the
// references handed out (refs: entry id by reference) and the index's
// invariants.
func checkCache(t *testing.T, c *cache, m *cacheModel, refs map[entryRef]int, now time.Duration) {
	t.Helper()
	if c.len() != len(m.entries) {
		t.Fatalf("cache has %d entries, want %d", c.len(), len(m.entries))
	}
	live := map[int]bool{}
	i := 0
	for s, prev := c.head, noSlot; s != noSlot; prev, s = s, c.meta(s).next {
		if i == len(m.entries) {
			t.Fatalf("the list is longer than %d", len(m.entries))
		}
		want := m.entries[i]
		if got := c.record(s); !bytes.Equal(got, want.rec) || c.meta(s).prev != prev {
			t.Fatalf("entry %d is\n% x\nwant\n% x", i, got, want.rec)
		}
		if d := c.deadline(entryRef{slot: s}); d != want.deadline {
			t.Fatalf("entry %d expires at %v, want %v", i, d, want.deadline)
		}
		if got := c.find(want.rec, c.index.hash(want.rec)); got != s {
			t.Fatalf("entry %d in slot %#x is found in %#x", i, s, got)
		}
		live[want.id] = want.deadline > now
		i++
	}
	if i != len(m.entries) || (c.tail == noSlot) != (i == 0) {
		t.Fatalf("the list has %d entries, want %d", i, len(m.entries))
	}
	for ref, id := range refs {
		if got := c.holds(ref, now); got != live[id] {
			t.Fatalf("holds(%v) = %v, want %v", ref, got, live[id])
		}
	}
	checkIndex(t, c)
}

// checkIndex checks the Robin Hood invariants: every slot in use is in
// the table once, at its recorded distance from its home.
func checkIndex(t *testing.T, c *cache) {
	t.Helper()
	x := &c.index
	seen := map[uint32]bool{}
	for i, d := range x.dist {
		if d == 0 {
			continue
		}
		slot := x.slots[i]
		if seen[slot] || c.meta(slot).gen&1 == 0 {
			t.Fatalf("position %d holds slot %#x twice or free", i, slot)
		}
		seen[slot] = true
		if home := x.home(x.hash(c.record(slot))); (home+int(d)-1)%len(x.slots) != i {
			t.Fatalf("position %d: slot %#x of home %d at distance %d", i, slot, home, d-1)
		}
	}
	if len(seen) != c.len() {
		t.Fatalf("the index holds %d slots, the cache %d entries", len(seen), c.len())
	}
	if len(x.slots) > 0 && c.len()*10 > len(x.slots)*maxLoad {
		t.Fatalf("%d entries in %d positions", c.len(), len(x.slots))
	}
}

// keepRef keeps a sample of the references handed out, stale ones among
// them, for checkCache.
func keepRef(refs map[entryRef]int, ref entryRef, id int) {
	for k := range refs {
		if len(refs) < 256 {
			break
		}
		delete(refs, k)
	}
	refs[ref] = id
}

// modelConns are connections whose records change size between updates:
// IPv4 and IPv6, templates told apart by their persistence data.
func modelConns(n int) []testConn {
	var out []testConn
	for i := range n {
		var c testConn
		if i%3 == 2 {
			c = tcp6(fmt.Sprintf("2001:db8::%x", i/4+1), uint16(i%4))
		} else {
			c = tcp4(fmt.Sprintf("198.51.%d.%d", 100+i/1000, i%250+1), uint16(i/250))
		}
		if i%7 == 0 {
			c.vaddr = netip.MustParseAddr("192.0.2.20")
			if c.caddr.Is6() {
				c.vaddr = netip.MustParseAddr("2001:db8::20")
			}
		}
		if i%11 == 0 {
			c.flags |= connFTemplate
			c.peName, c.peData = "sip", []string{"a", "bb"}[i%2]
		}
		out = append(out, c)
	}
	return out
}

// variant is an update of c's record: a new state and timeout, and
// sometimes options that make it longer.
func variant(c testConn, rnd *rand.Rand) []byte {
	c.timeout = uint32(rnd.IntN(40))
	c.state = uint16(rnd.IntN(2) + 1)
	c.seq = rnd.IntN(4) == 0
	r := c.encode()
	if rnd.IntN(4) == 0 {
		r = withOrigin(r, "director-"+string(rune('a'+rnd.IntN(3))))
	}
	return r
}

// TestCacheModel drives the cache through random updates, evictions,
// expiries and removals and compares it with the model after each step.
func TestCacheModel(t *testing.T) {
	for _, tt := range []struct {
		name             string
		max, conns, ops  int
		checkEvery, seed int
	}{
		{"small, evicting", 40, 120, 4000, 1, 1},
		{"small, not full", 200, 120, 4000, 1, 2},
		{"large, emptied now and then", 4000, 5000, 20_000, 997, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(tt.seed), 0))
			c := newCache(tt.max, 3*time.Minute)
			m := &cacheModel{max: tt.max}
			refs := map[entryRef]int{}
			pool := modelConns(tt.conns)
			now := time.Duration(0)
			vips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::20")}
			for op := range tt.ops {
				switch k := rnd.IntN(1000); {
				case k < 900:
					r := variant(pool[rnd.IntN(len(pool))], rnd)
					ref, evicted := c.put(r, now)
					wantEvicted, id := m.put(r, now, ref, evicted, c.defTimeout)
					if evicted != wantEvicted {
						t.Fatalf("op %d: evicted %v, want %v", op, evicted, wantEvicted)
					}
					keepRef(refs, ref, id)
				case k < 960:
					now += time.Duration(rnd.IntN(5000)) * time.Millisecond
				case k < 985:
					cur := c.newCursor()
					expired := 0
					for {
						e, n := c.peek(cur, now)
						expired += n
						if !e.ok() {
							break
						}
						cur.advance()
					}
					c.closeCursor(cur)
					if want := m.expire(now); expired != want {
						t.Fatalf("op %d: %d expired, want %d", op, expired, want)
					}
				case k < 990:
					vip := vips[rnd.IntN(len(vips))]
					if got, want := c.releaseVIP(vip), m.removeIf(func(r rec) bool { return r.vaddr() == vip }); got != want {
						t.Fatalf("op %d: released %d, want %d", op, got, want)
					}
				case k < 999:
					dest := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.5"), 80)
					want := m.removeIf(func(r rec) bool { return r.vaddr() == vips[0] && r.dest() == dest })
					if got := c.forgetDests(vips[0], []netip.AddrPort{dest}); got != want {
						t.Fatalf("op %d: forgot %d, want %d", op, got, want)
					}
				default: // everything goes: the slabs give their chunks back
					for _, vip := range vips {
						c.releaseVIP(vip)
					}
					m.entries = nil
				}
				if op%tt.checkEvery == 0 || op == tt.ops-1 {
					checkCache(t, c, m, refs, now)
				}
			}
		})
	}
}

// FuzzCache puts the records of any valid datagram, several times and
// in turn, into a small cache and compares it with the model; records of
// one connection must hash alike and be found as one.
func FuzzCache(f *testing.F) {
	v4, v6 := tcp4("198.51.100.7", 40000), tcp6("2001:db8::7", 40001)
	v4.seq = true
	v6.flags, v6.peData, v6.peName = connFTemplate, "id", "sip"
	other := v6
	other.peData = "other"
	f.Add(datagram(1, v4.encode(), v6.encode(), other.encode(), tcp4("198.51.100.7", 40000).encode()))
	f.Add(datagram(1, withOrigin(v4.encode(), "director-b"), v4.encode(), withOpts(v4, optFParam|0x20, 1, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, recs, err := parseDatagram(b)
		if err != nil {
			if !errors.Is(err, errInvalid) {
				t.Fatal(err)
			}
			return
		}
		c := newCache(3, time.Minute)
		m := &cacheModel{max: 3}
		refs := map[entryRef]int{}
		for i := range 3 * len(recs) {
			r := recs[(i*7)%len(recs)]
			now := time.Duration(i) * 300 * time.Millisecond
			ref, evicted := c.put(r, now)
			wantEvicted, id := m.put(r, now, ref, evicted, c.defTimeout)
			if evicted != wantEvicted {
				t.Fatalf("put %d: evicted %v, want %v", i, evicted, wantEvicted)
			}
			keepRef(refs, ref, id)
			checkCache(t, c, m, refs, now)
		}
		for _, a := range recs {
			for _, b := range recs {
				same := a.key() == b.key()
				if sameConn(a, b) != same || (same && c.index.hash(a) != c.index.hash(b)) {
					t.Fatalf("records\n% x\n% x\nare one connection: %v; sameConn says otherwise or they hash apart", a, b, same)
				}
			}
		}
	})
}
