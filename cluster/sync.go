package cluster

import (
	"bytes"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// SyncMagic starts every connection-sync message: the node hands such user
// messages to its SyncReceiver instead of decoding them as heartbeats.
const SyncMagic = 'S'

// SyncReceiver takes the connection-sync traffic of the cluster: messages
// from other directors, and which directors can be sent to. Its methods are
// called from the node's goroutines and must not block.
type SyncReceiver interface {
	// Deliver hands over a message as it arrived: the sender's identity is
	// inside it (sealed with the cluster key like all of it), not taken
	// from the network.
	Deliver(msg []byte)
	// MemberJoined: a director is heard (first, again after a silence of two
	// failure timeouts, or restarted); it may lack state.
	MemberJoined(name string)
	// MemberLeft: a director has not been heard for two failure timeouts
	// or said it leaves.
	MemberLeft(name string)
}

// SetSync makes r receive the connection-sync traffic, first the messages
// that came before it (earlySync), and tells it of the directors already
// heard: one heard between the node's start and this call was announced
// to nobody, so this director never replayed its cache to it, and that
// director waited out its whole catch-up limit (seen in a CI run: the VIP
// then moved to it 15 s late). A director announced twice (here and by the
// loop at once) is replayed to twice, which is harmless.
func (n *Node) SetSync(r SyncReceiver) {
	n.early.mu.Lock()
	for _, msg := range n.early.msgs {
		r.Deliver(msg)
	}
	n.early.msgs, n.early.bytes, n.early.closed = nil, 0, true
	n.sync.Store(&r)
	n.early.mu.Unlock()
	n.mu.Lock()
	heard := slices.Sorted(maps.Keys(n.syncPeers))
	n.mu.Unlock()
	for _, name := range heard {
		r.MemberJoined(name)
	}
}

// earlySync keeps the connection-sync messages that come between the
// node's start and SetSync. The other directors replay their connections
// to a director as soon as they hear it, which may be before its relay is
// attached (the relay is made once the node has joined): without them its
// catch-up waited for end markers that had come and gone, its whole limit
// (15 s; seen in a CI run, a restarted director took its VIP back that
// late). Bounded: a replay larger than that is cut, and that director
// waits out its limit as before.
type earlySync struct {
	mu     sync.Mutex
	msgs   [][]byte
	bytes  int
	closed bool // SetSync ran, or the window passed: no more kept
}

const (
	earlySyncBytes    = 4 << 20          // at most, kept before SetSync
	earlySyncMessages = 1024             // at most, half what the relay queues before it runs
	earlySyncWindow   = 30 * time.Second // after the node's start; then none is kept
)

// deliverSync hands a connection-sync message to the receiver, or keeps it
// for SetSync while there is none yet. Messages keep their order: SetSync
// delivers those kept before any that comes after it.
func (n *Node) deliverSync(b []byte) {
	if r := n.syncReceiver(); r != nil {
		r.Deliver(b)
		return
	}
	e := &n.early
	e.mu.Lock()
	if r := n.syncReceiver(); r != nil { // SetSync ran meanwhile
		e.mu.Unlock()
		r.Deliver(b)
		return
	}
	defer e.mu.Unlock()
	if e.closed || time.Since(n.started) > earlySyncWindow {
		e.msgs, e.bytes, e.closed = nil, 0, true // without connection sync nothing will take them
		return
	}
	if e.bytes+len(b) > earlySyncBytes || len(e.msgs) >= earlySyncMessages {
		return
	}
	e.msgs = append(e.msgs, bytes.Clone(b))
	e.bytes += len(b)
}

// SyncCatchUp is what a SyncReceiver implements when it can tell whether
// the directors heard since it started have sent it their connections
// (connsync.Relay.CaughtUp). A starting director owns no VIP until then
// (bounded by the receiver): the flows it would take over, or that the
// routers would send it under ECMP, need their connection entries here.
type SyncCatchUp interface {
	CaughtUp() bool
}

// syncCaughtUp reports whether the connection state this director waits
// for at start has arrived; true without connection sync.
func (n *Node) syncCaughtUp() bool {
	c, ok := n.syncReceiver().(SyncCatchUp)
	return !ok || c.CaughtUp()
}

func (n *Node) syncReceiver() SyncReceiver {
	if r := n.sync.Load(); r != nil {
		return *r
	}
	return nil
}

// SyncDowngrader is what a SyncReceiver implements when its messages
// (always of the newest version) can be written in an older wire version
// for a director of the release before (connsync.Relay.Downgrade).
type SyncDowngrader interface {
	// Downgrade returns msg in wire version v, or nil if it has none.
	Downgrade(msg []byte, v byte) []byte
}

// Broadcast sends msg to every director heard within two failure timeouts,
// best effort (one encrypted UDP packet each, like the heartbeats), in the
// version of each one's heartbeats.
func (n *Node) Broadcast(msg []byte) {
	n.mu.Lock()
	peers := make([]syncPeer, 0, len(n.syncPeers))
	for _, p := range n.syncPeers {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	var older []byte
	for _, p := range peers {
		m := msg
		if p.version < hbVersion {
			if older == nil {
				older = n.downgrade(msg, p.version)
			}
			m = older
		}
		n.sendSync(p.addr, m)
	}
}

// SendTo sends msg to the named director, best effort.
func (n *Node) SendTo(member string, msg []byte) {
	n.mu.Lock()
	p, ok := n.syncPeers[member]
	n.mu.Unlock()
	if !ok {
		return
	}
	if p.version < hbVersion {
		msg = n.downgrade(msg, p.version)
	}
	n.sendSync(p.addr, msg)
}

func (n *Node) downgrade(msg []byte, v byte) []byte {
	if d, ok := n.syncReceiver().(SyncDowngrader); ok {
		return d.Downgrade(msg, v)
	}
	return msg
}

func (n *Node) sendSync(addr string, msg []byte) {
	if msg == nil {
		return
	}
	if err := n.ml.SendToAddress(memberlist.Address{Addr: addr}, msg); err != nil {
		n.log.Debug("cannot send connection sync", "to", addr, "err", err)
	}
}

// syncPeer is a director sync messages go to; a new incarnation is a
// restarted process, which has lost its state. version is the wire
// version of its heartbeats, which its sync messages are sent in.
type syncPeer struct {
	addr        string
	incarnation uint64
	version     byte
}

// publishSyncPeers runs on the loop after a check changed something: it
// tells the receiver who came and went and updates the send list.
func (s *loopState) publishSyncPeers() {
	n := s.n
	s.wireChanged = false
	now := make(map[string]syncPeer, len(s.peers))
	for _, p := range s.peers {
		if p.state.counted() && p.addr != "" {
			now[p.name] = syncPeer{p.addr, p.incarnation, s.syncVersion(p.addr)}
		}
	}
	n.mu.Lock()
	before := n.syncPeers
	if maps.Equal(before, now) {
		n.mu.Unlock()
		return
	}
	n.syncPeers = now
	n.mu.Unlock()
	r := n.syncReceiver()
	if r == nil {
		return
	}
	for name, p := range now {
		if old, ok := before[name]; !ok || old.addr != p.addr || old.incarnation != p.incarnation { // new, moved or restarted
			r.MemberJoined(name)
		}
	}
	for name := range before {
		if _, ok := now[name]; !ok {
			r.MemberLeft(name)
		}
	}
}
