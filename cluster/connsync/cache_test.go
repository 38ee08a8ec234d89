package connsync

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func conns(n int) [][]byte {
	var rs [][]byte
	for i := range n {
		rs = append(rs, tcp4(fmt.Sprintf("198.51.100.%d", i+1), 1000).encode())
	}
	return rs
}

// walk returns the last byte of the client address of each entry a fresh
// cursor visits at now.
func walk(c *cache, now time.Duration) []byte {
	var got []byte
	cur := c.newCursor()
	defer c.closeCursor(cur)
	for {
		e, _ := c.peek(cur, now)
		if !e.ok() {
			return got
		}
		cur.advance()
		got = append(got, c.rec(e)[offAddrs+3])
	}
}

func TestCacheUpdateAndEvict(t *testing.T) {
	rs := conns(4)
	tests := []struct {
		name    string
		puts    []int // indexes into rs
		max     int
		want    []byte
		evicted int
	}{
		{"in order", []int{0, 1, 2}, 10, []byte{1, 2, 3}, 0},
		{"update moves to the end", []int{0, 1, 2, 0}, 10, []byte{2, 3, 1}, 0},
		{"full evicts the least recently updated", []int{0, 1, 2, 0, 3}, 3, []byte{3, 1, 4}, 1},
		{"update of a full cache evicts nothing", []int{0, 1, 2, 1}, 3, []byte{1, 3, 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(tt.max, time.Minute)
			evicted := 0
			for _, i := range tt.puts {
				if _, ev := c.put(rs[i], 0); ev {
					evicted++
				}
			}
			if got := walk(c, 0); string(got) != string(tt.want) || evicted != tt.evicted || c.len() != len(tt.want) {
				t.Fatalf("entries %v, evicted %d, len %d; want %v, %d", got, evicted, c.len(), tt.want, tt.evicted)
			}
		})
	}
}

func TestCacheExpiry(t *testing.T) {
	c := newCache(10, 3*time.Minute)
	short := tcp4("198.51.100.1", 1)
	short.timeout = 10
	zero := tcp4("198.51.100.2", 1)
	zero.timeout = 0 // the kernel's default applies: 3 minutes
	long := tcp4("198.51.100.3", 1)
	for _, r := range []testConn{short, zero, long} {
		c.put(r.encode(), 0)
	}
	for _, tt := range []struct {
		at   time.Duration
		want []byte
	}{
		{9 * time.Second, []byte{1, 2, 3}},
		{10 * time.Second, []byte{2, 3}},
		{3 * time.Minute, []byte{3}},
		{15 * time.Minute, nil},
	} {
		if got := walk(c, tt.at); string(got) != string(tt.want) {
			t.Errorf("at %v: %v, want %v", tt.at, got, tt.want)
		}
	}
	if c.len() != 0 {
		t.Errorf("%d entries left", c.len())
	}
}

// TestCursorSurvives changes the cache under a cursor: every entry still
// present is visited, none twice unless updated.
func TestCursorSurvives(t *testing.T) {
	rs := conns(5)
	c := newCache(5, time.Minute)
	for _, r := range rs {
		c.put(r, 0)
	}
	cur := c.newCursor()
	e, _ := c.peek(cur, 0)
	cur.advance()
	got := []byte{c.rec(e)[offAddrs+3]}          // 1
	c.put(rs[1], 0)                              // 2 moves to the end, cursor skips to 3
	c.remove(c.find(rs[2], c.index.hash(rs[2]))) // 3 goes, cursor moves to 4
	c.put(tcp4("198.51.100.9", 1000).encode(), 0)
	for {
		e, _ := c.peek(cur, 0)
		if !e.ok() {
			break
		}
		cur.advance()
		got = append(got, c.rec(e)[offAddrs+3])
	}
	if want := []byte{1, 4, 5, 2, 9}; string(got) != string(want) {
		t.Fatalf("visited %v, want %v", got, want)
	}
	// A full cache evicts the entry the cursor is on.
	cur2 := c.newCursor()
	c.put(tcp4("198.51.100.10", 1000).encode(), 0) // evicts 1
	if e, _ := c.peek(cur2, 0); !e.ok() || c.rec(e)[offAddrs+3] != 4 {
		t.Fatalf("after eviction the cursor is on %v", e)
	}
}

func TestReleaseVIP(t *testing.T) {
	c := newCache(10, time.Minute)
	other := tcp4("198.51.100.1", 1)
	other.vaddr = netip.MustParseAddr("192.0.2.20")
	c.put(other.encode(), 0)
	for _, r := range conns(3) {
		c.put(r, 0)
	}
	if n := c.releaseVIP(netip.MustParseAddr("192.0.2.10")); n != 3 || c.len() != 1 {
		t.Fatalf("released %d, %d left", n, c.len())
	}
}

func TestForgetDests(t *testing.T) {
	c := newCache(10, time.Minute)
	otherVIP := tcp4("198.51.100.1", 1)
	otherVIP.vaddr = netip.MustParseAddr("192.0.2.20")
	otherDest := tcp4("198.51.100.2", 1)
	otherDest.daddr = netip.MustParseAddr("10.0.0.6")
	otherPort := tcp4("198.51.100.3", 1)
	otherPort.dport = 8080
	for _, r := range []testConn{otherVIP, otherDest, otherPort, tcp4("198.51.100.4", 1), tcp4("198.51.100.5", 1)} {
		c.put(r.encode(), 0)
	}
	vip := netip.MustParseAddr("192.0.2.10")
	if n := c.forgetDests(vip, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:80")}); n != 2 || c.len() != 3 {
		t.Fatalf("forgot %d, %d left; want 2 and 3", n, c.len())
	}
	// Port 0 (a firewall-mark service's destination) matches any port.
	if n := c.forgetDests(vip, []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("10.0.0.5"), 0)}); n != 1 || c.len() != 2 {
		t.Fatalf("forgot %d, %d left; want 1 and 2", n, c.len())
	}
}

// TestSlabGivesChunksBack empties a cache that grew over several chunks:
// all but the first go back, and references into them hold no more, not
// even once their slots are handed out again.
func TestSlabGivesChunksBack(t *testing.T) {
	c := newCache(10_000, time.Minute)
	put := func(n int, vip string) []entryRef {
		var refs []entryRef
		for i := range n {
			r := tcp4(fmt.Sprintf("198.51.%d.%d", 100+i/250, i%250+1), 1)
			r.vaddr = netip.MustParseAddr(vip)
			ref, _ := c.put(r.encode(), 0)
			refs = append(refs, ref)
		}
		return refs
	}
	perChunk := 1 << c.slabs[0].shift
	old := put(2*perChunk+1, "192.0.2.10")
	if n := len(c.slabs[0].recs); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
	}
	if n := c.releaseVIP(netip.MustParseAddr("192.0.2.10")); n != len(old) || c.len() != 0 {
		t.Fatalf("released %d, %d left", n, c.len())
	}
	if n := len(c.slabs[0].recs); n != 1 {
		t.Fatalf("%d chunks after the cache emptied, want 1", n)
	}
	for _, ref := range old {
		if c.holds(ref, 0) {
			t.Fatalf("removed entry %v still held", ref)
		}
	}
	fresh := put(len(old), "192.0.2.20")
	for i, ref := range old {
		if c.holds(ref, 0) || !c.holds(fresh[i], 0) {
			t.Fatalf("slot %#x: old reference held %v, new %v", ref.slot, c.holds(ref, 0), c.holds(fresh[i], 0))
		}
	}
	checkIndex(t, c)
}
