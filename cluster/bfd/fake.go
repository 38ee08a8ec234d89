package bfd

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Fake is an in-memory stand-in for Server in tests of its users: sessions
// are added and removed as on a Server, and the test moves them between
// states with SetState, which notifies subscribers as the Server would.
type Fake struct {
	subs subscribers

	mu     sync.Mutex // guards all following fields
	peers  map[netip.Addr]PeerStatus
	closed bool
	ops    []string
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{peers: map[netip.Addr]PeerStatus{}}
}

// AddPeer adds a session in state Down (or keeps an existing one).
func (f *Fake) AddPeer(_ context.Context, p PeerConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if !p.Peer.IsValid() {
		return errors.New("bfd: peer address missing")
	}
	f.ops = append(f.ops, "add "+p.Peer.String())
	if _, ok := f.peers[p.Peer]; !ok {
		f.peers[p.Peer] = PeerStatus{Peer: p.Peer, Local: p.Local, Interface: p.Interface,
			SessionStatus: SessionStatus{State: Down, RemoteState: Down}}
	}
	return nil
}

// RemovePeer removes a session.
func (f *Fake) RemovePeer(_ context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "remove "+addr.String())
	delete(f.peers, addr)
	return nil
}

// Peers returns the sessions sorted by peer.
func (f *Fake) Peers(context.Context) ([]PeerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]PeerStatus, 0, len(f.peers))
	for _, p := range f.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return a.Peer.Compare(b.Peer) })
	return out, nil
}

// Subscribe registers fn for state changes.
func (f *Fake) Subscribe(fn func(Change)) (cancel func()) { return f.subs.add(fn) }

// SetState moves the session with peer to st (the neighbour to remote) and
// notifies subscribers synchronously; false when there is no such session
// or nothing changed.
func (f *Fake) SetState(peer netip.Addr, st State, diag Diag, remote State) bool {
	f.mu.Lock()
	p, ok := f.peers[peer]
	if !ok || (p.State == st && p.RemoteState == remote) {
		f.mu.Unlock()
		return false
	}
	c := Change{Peer: peer, Old: p.State, State: st, Diag: diag, RemoteState: remote, At: time.Now()}
	p.State, p.Diag, p.RemoteState, p.Since = st, diag, remote, c.At
	f.peers[peer] = p
	f.mu.Unlock()
	f.subs.notify(c)
	return true
}

// Ops returns the log of AddPeer/RemovePeer calls ("add 10.0.0.1").
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// Close makes later AddPeer calls fail.
func (f *Fake) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}
