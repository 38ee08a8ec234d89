package arp

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
)

// Announcer tells the hosts on an interface's link that an address is now
// reachable at that interface's MAC address, so they update their neighbour
// caches at once instead of when the old entry expires (a VIP that moved).
// Implementations must be safe for concurrent use.
type Announcer interface {
	// Announce sends one announcement of addr on dev: a gratuitous ARP
	// request and reply for IPv4, an unsolicited neighbour advertisement
	// with the override flag for IPv6.
	Announce(ctx context.Context, dev string, addr netip.Addr) error
}

// FakeAnnouncer records announcements instead of sending them.
type FakeAnnouncer struct {
	mu   sync.Mutex // guards sent
	sent []string
}

var _ Announcer = (*FakeAnnouncer)(nil)

// Announce implements Announcer.
func (f *FakeAnnouncer) Announce(ctx context.Context, dev string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("announce %s %s", dev, addr))
	return nil
}

// Sent returns the announcements so far ("announce DEV ADDR") and forgets
// them.
func (f *FakeAnnouncer) Sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sent
	f.sent = nil
	return s
}
