package agent

import (
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
)

// The budget of the conntrack entries a director creates for the other
// directors' FULLNAT connections. Each record connection sync brings
// becomes an entry here, whether or not the flow ever comes: a flood of
// single-packet flows (UDP, or bare TCP ACKs that sloppy_tcp turns into
// ESTABLISHED IPVS entries) through the other directors would otherwise
// fill this director's table and make it drop its own new flows, health
// checks and BGP included. So the entries created from records are
// bounded: all together by a share of nf_conntrack_max
// (cluster.conn_sync.peer_conntrack_share), and each director's by that
// cap divided among the other directors, so that one flooded director
// cannot take the room of the others' connections. Beyond it a record
// only refreshes an entry that exists (nat.ConntrackEntry.NoCreate).
//
// The budget counts each entry it let create until the lifetime it was
// created (or last refreshed) with runs out: one map entry per counted
// conntrack entry, so its memory is bounded by the cap. It over-counts an
// entry the kernel dropped early or IPVS removed with its connection, and
// stops counting one the connection's own packets keep alive longer:
// that one is this director's flow then, no longer a claim.

// Lifetimes of peer-created entries.
const (
	// peerUDPFirstTimeout is a UDP entry's lifetime when it is created,
	// the kernel's own for a flow not answered yet
	// (nf_conntrack_udp_timeout): one record may be one spoofed packet.
	// A second record, or the flow's own packets, keep it longer.
	peerUDPFirstTimeout = 30 * time.Second
	// maxPeerTimeout caps every peer-created entry's lifetime, at IPVS's
	// default for an ESTABLISHED TCP connection: a record may ask for
	// more (ipvs.timeouts), and an idle connection past it keeps its
	// entry on its own director only.
	maxPeerTimeout = 15 * time.Minute
	// minPeerTimeout is the shortest lifetime nat gives an entry.
	minPeerTimeout = 30 * time.Second
)

// peerKey is a conntrack entry's original tuple.
type peerKey struct {
	proto          l4.Protocol
	client, target netip.AddrPort
}

func keyOf(e nat.ConntrackEntry) peerKey { return peerKey{e.Protocol, e.Client, e.VIP} }

// peerCharge is one counted entry.
type peerCharge struct {
	origin string
	expiry int64 // unix second when the budget stops counting it
}

// peerBudget is owned by PeerFlows.Run's goroutine.
type peerBudget struct {
	share     int // percent of nf_conntrack_max
	limit     int // all origins together; 0: unknown, no cap
	perOrigin int // each origin's; 0: no cap
	live      map[peerKey]peerCharge
	byOrigin  map[string]int
	pending   map[string]int // admitted in the batch being written
	// wheel holds each counted key once, in the slot of its expiry second
	// (modulo its length, longer than any lifetime): a key whose expiry
	// a refresh moved is put in its new slot when the old one comes.
	wheel [][]peerKey
	now   int64 // the last second advance processed
}

func newPeerBudget(share int) *peerBudget {
	return &peerBudget{share: share, live: map[peerKey]peerCharge{}, byOrigin: map[string]int{}, pending: map[string]int{},
		wheel: make([][]peerKey, int(maxPeerTimeout/time.Second)+2)}
}

// setLimits takes nf_conntrack_max (0: unknown) and the number of other
// directors entries may come from.
func (b *peerBudget) setLimits(conntrackMax, peers int) {
	b.limit, b.perOrigin = 0, 0
	if conntrackMax > 0 {
		b.limit = max(1, conntrackMax*b.share/100)
		b.perOrigin = max(1, b.limit/max(1, peers))
	}
}

// advance stops counting the entries whose lifetime ran out by now.
func (b *peerBudget) advance(now time.Time) {
	sec := now.Unix()
	if b.now == 0 || sec-b.now > int64(len(b.wheel)) {
		b.now = sec - int64(len(b.wheel))
	}
	for ; b.now < sec; b.now++ {
		slot := &b.wheel[(b.now+1)%int64(len(b.wheel))]
		keys := *slot
		*slot = nil
		for _, k := range keys {
			c, ok := b.live[k]
			switch {
			case !ok:
			case c.expiry <= b.now+1:
				delete(b.live, k)
				b.byOrigin[c.origin]--
				if b.byOrigin[c.origin] <= 0 {
					delete(b.byOrigin, c.origin)
				}
			default:
				b.place(k, c.expiry)
			}
		}
	}
}

func (b *peerBudget) place(k peerKey, expiry int64) {
	i := expiry % int64(len(b.wheel))
	b.wheel[i] = append(b.wheel[i], k)
}

// admit says whether an entry from origin may be created now, and
// reserves its room until settle.
func (b *peerBudget) admit(origin string) bool {
	if b.limit == 0 {
		return true
	}
	total := len(b.live)
	for _, n := range b.pending {
		total += n
	}
	if total >= b.limit || b.byOrigin[origin]+b.pending[origin] >= b.perOrigin {
		return false
	}
	b.pending[origin]++
	return true
}

// counted reports whether the entry with e's tuple is counted already:
// creating it again costs nothing more.
func (b *peerBudget) counted(e nat.ConntrackEntry) bool {
	_, ok := b.live[keyOf(e)]
	return ok
}

// settle counts the entries a batch created and moves the expiry of the
// counted ones it refreshed, then frees the batch's reservations.
func (b *peerBudget) settle(now time.Time, entries []nat.ConntrackEntry, origins []string, outcomes []nat.RestoreOutcome) {
	clear(b.pending)
	for i, o := range outcomes {
		e := entries[i]
		k := keyOf(e)
		c, tracked := b.live[k]
		switch {
		case o.New():
			t := e.Timeout
			if e.CreateTimeout > 0 {
				t = e.CreateTimeout
			}
			expiry := now.Unix() + lifetime(t)
			if tracked {
				b.byOrigin[c.origin]--
			} else {
				b.place(k, expiry)
			}
			b.live[k] = peerCharge{origin: origins[i], expiry: max(expiry, c.expiry)}
			b.byOrigin[origins[i]]++
		case o == nat.OutcomeRefreshed && tracked:
			c.expiry = max(c.expiry, now.Unix()+lifetime(e.Timeout))
			b.live[k] = c
		}
	}
}

// lifetime is the seconds nat gives an entry of timeout t.
func lifetime(t time.Duration) int64 {
	return int64(min(max(t, minPeerTimeout), maxPeerTimeout) / time.Second)
}

// count returns the entries counted and the cap (0: none).
func (b *peerBudget) count() (live, limit int) { return len(b.live), b.limit }
