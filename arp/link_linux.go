package arp

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var _ LinkWatcher = Kernel{}

// WatchLink implements LinkWatcher with an rtnetlink subscription to link
// updates in the current network namespace (listing the links first). A
// subscription that breaks (its socket buffer overflowed) is made again,
// and the state read afresh.
func (Kernel) WatchLink(ctx context.Context, dev string) (<-chan bool, error) {
	sub, err := subscribeLinks()
	if err != nil {
		return nil, fmt.Errorf("watching interface %q: %w", dev, err)
	}
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		last, known := false, false
		report := func(up bool) {
			if !known || up != last {
				last, known = up, true
				sendLatest(out, up)
			}
		}
		report(linkUp(dev))
		for {
			sub.follow(ctx, dev, report)
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if sub, err = subscribeLinks(); err != nil {
				continue // retried after a second
			}
			report(linkUp(dev))
		}
	}()
	return out, nil
}

// linkSub is one rtnetlink subscription to link updates.
type linkSub struct {
	updates chan netlink.LinkUpdate
	done    chan struct{}
	failed  chan struct{}
}

func subscribeLinks() (*linkSub, error) {
	s := &linkSub{updates: make(chan netlink.LinkUpdate, 64), done: make(chan struct{}), failed: make(chan struct{}, 1)}
	err := netlink.LinkSubscribeWithOptions(s.updates, s.done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(error) {
			select {
			case s.failed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// follow reports dev's state from the updates until ctx ends or the
// subscription breaks, then closes it.
func (s *linkSub) follow(ctx context.Context, dev string, report func(bool)) {
	defer func() {
		close(s.done)
		go func() { // until netlink's reader sees done and closes updates
			for range s.updates {
			}
		}()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.failed:
			return
		case u, ok := <-s.updates:
			if !ok {
				return
			}
			if u.Link == nil || u.Attrs().Name != dev {
				continue
			}
			report(u.Header.Type != unix.RTM_DELLINK && carries(u.Link))
		}
	}
}

// carries reports whether l is up and has its carrier.
func carries(l netlink.Link) bool {
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 {
		return false
	}
	return a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown
}

// linkUp reads dev's state (missing: down).
func linkUp(dev string) bool {
	l, err := netlink.LinkByName(dev)
	return err == nil && carries(l)
}
