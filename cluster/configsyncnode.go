package cluster

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/memberlist"

	"github.com/lvsd/lvsd/cluster/configsync"
)

// ConfigSyncReceiver takes the configuration-sync messages
// (cluster/configsync) of the cluster. DeliverConfig is called from
// memberlist's goroutines, for packets and for streams, and must not
// block.
type ConfigSyncReceiver interface {
	DeliverConfig(msg []byte)
}

// SetConfigSync makes r receive the configuration-sync messages; without
// it they are dropped.
func (n *Node) SetConfigSync(r ConfigSyncReceiver) { n.configSync.Store(&r) }

func (n *Node) configSyncReceiver() ConfigSyncReceiver {
	if r := n.configSync.Load(); r != nil {
		return *r
	}
	return nil
}

// deliverConfig hands a configuration message over; it says whether msg
// was one.
func (n *Node) deliverConfig(msg []byte) bool {
	if len(msg) == 0 || msg[0] != configsync.Magic {
		return false
	}
	if r := n.configSyncReceiver(); r != nil {
		r.DeliverConfig(msg)
	}
	return true
}

// ConfigPeers returns the names of the directors heard within two failure
// timeouts that speak this build's wire: a director of the release
// before knows no configuration sync, and is sent none.
func (n *Node) ConfigPeers() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for name, p := range n.syncPeers {
		if p.version >= hbVersion {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

var errNotHeard = errors.New("director not heard")

// SendConfig sends msg to the named director over a TCP stream of the
// cluster port (encrypted and labelled like the rest): for records, which
// may be larger than a packet and must arrive. It blocks until sent, at
// most the stream timeout (3 s).
func (n *Node) SendConfig(member string, msg []byte) error {
	addr, err := n.configPeerAddr(member)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("port of %s: %w", addr, err)
	}
	return n.ml.SendReliable(&memberlist.Node{Name: member, Addr: net.ParseIP(host), Port: uint16(p)}, msg)
}

// SendConfigPacket sends msg to the named director as one packet, best
// effort: for digests, which repeat.
func (n *Node) SendConfigPacket(member string, msg []byte) error {
	addr, err := n.configPeerAddr(member)
	if err != nil {
		return err
	}
	return n.ml.SendToAddress(memberlist.Address{Addr: addr, Name: member}, msg)
}

func (n *Node) configPeerAddr(member string) (string, error) {
	n.mu.Lock()
	p, ok := n.syncPeers[member]
	n.mu.Unlock()
	if !ok || p.version < hbVersion {
		return "", fmt.Errorf("%s: %w", member, errNotHeard)
	}
	return p.addr, nil
}
