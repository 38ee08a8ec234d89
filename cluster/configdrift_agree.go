package cluster

import (
	"maps"
)

// PeerConfig is what this director knows of a live peer's service
// configuration, compared with the digest this director advertises: what
// a director needs to tell whether every live director has loaded a
// changed service before it puts the change in force (coordinated
// changes under ecmp).
type PeerConfig struct {
	// Known: the peer advertises a digest of this director's scheme. A
	// director of an earlier release advertises none.
	Known bool
	// Same: the peer's digest is this director's.
	Same bool
	// Compared: every one of the peer's per-service digests was heard, so
	// Differ names every service that differs.
	Compared bool
	// Differ names the services defined differently on the two directors,
	// or on one of them only, as far as heard (names cut as on the wire,
	// at 200 bytes). Shared with the loop's next publication: read only.
	Differ map[string]bool
}

// PeerConfigs are the live peers' configurations by name, compared with
// the digest Against.
type PeerConfigs struct {
	Against [16]byte
	Peers   map[string]PeerConfig
}

// PeerConfigs returns what the loop last published of the live peers'
// configurations. Safe to call from any goroutine.
func (n *Node) PeerConfigs() PeerConfigs {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.configs
}

// PeerConfigsChanged delivers a value when PeerConfigs may have changed.
func (n *Node) PeerConfigsChanged() <-chan struct{} { return n.configsChanged }

// publishConfigs runs on the loop after a change of liveness or of what
// is known of a configuration: the live peers' configurations, published
// when they differ from the last ones.
func (s *loopState) publishConfigs() {
	s.configDirty = false
	own := s.config
	if own == nil {
		return
	}
	out := PeerConfigs{Against: own.Sum, Peers: map[string]PeerConfig{}}
	for _, p := range s.peers {
		if !p.state.live() {
			continue
		}
		out.Peers[p.name] = peerConfigOf(own, p.config)
	}
	n := s.n
	n.mu.Lock()
	same := out.Against == n.configs.Against && maps.EqualFunc(out.Peers, n.configs.Peers, func(a, b PeerConfig) bool {
		return a.Known == b.Known && a.Same == b.Same && a.Compared == b.Compared && maps.Equal(a.Differ, b.Differ)
	})
	if !same {
		n.configs = out
	}
	n.mu.Unlock()
	if !same {
		select {
		case n.configsChanged <- struct{}{}:
		default:
		}
	}
}

// peerConfigOf compares pc (nil: none heard) with own.
func peerConfigOf(own *ConfigDigest, pc *peerConfig) PeerConfig {
	switch {
	case pc == nil || pc.advert.scheme != own.Scheme:
		return PeerConfig{}
	case pc.advert.sum == own.Sum:
		return PeerConfig{Known: true, Same: true}
	}
	return PeerConfig{Known: true, Compared: pc.compared, Differ: maps.Clone(pc.diff)}
}

// ServiceWireName is the name under which PeerConfig.Differ names the
// service called name.
func ServiceWireName(name string) string { return wireName(name) }
