package nat

import (
	"context"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Watch implements Watcher: it listens to the kernel's nftables change
// notifications (the NFNLGRP_NFTABLES group, what `nft monitor` reads)
// and signals on every deletion of a table, chain, set or rule, whoever
// made it. It decodes nothing but the message type, so its cost is one
// read per batch of notifications, also while lvsd replaces its own large
// tables. A notification lost to a full socket buffer (ENOBUFS) is a
// change too.
func (k *Kernel) Watch(ctx context.Context) (<-chan struct{}, error) {
	cfg := &netlink.Config{Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)}
	if k.netns >= 0 {
		cfg.NetNS = k.netns
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("listening to nftables changes: %w", classify(err))
	}
	_ = c.SetReadBuffer(1 << 20)
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	go func() {
		defer close(out)
		for {
			msgs, err := c.Receive()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, unix.ENOBUFS) {
					signal()
					continue
				}
				return // the caller falls back to its audit
			}
			for _, m := range msgs {
				if deletion(m.Header.Type) {
					signal()
					break
				}
			}
		}
	}()
	return out, nil
}

// deletion says whether a netlink message type is an nftables deletion.
func deletion(t netlink.HeaderType) bool {
	if uint16(t)>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return false
	}
	switch uint16(t) & 0xff {
	case unix.NFT_MSG_DELTABLE, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELSET, unix.NFT_MSG_DELRULE:
		return true
	}
	return false
}
