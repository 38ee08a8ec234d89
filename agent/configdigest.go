package agent

import (
	"maps"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster"
)

// ConfigAdvertiser tells the other directors what this one's service
// configuration is (cluster.Node), so that a cluster never silently runs
// two. Implementations must be safe for concurrent use.
type ConfigAdvertiser interface {
	AdvertiseConfig(*cluster.ConfigDigest)
}

// serviceDigests returns the digest of each of c's services by name
// (config.Service.Digest). With prev, only the services in changed are
// digested again, the rest taken from prev: a reload of one file among
// 10,000 costs that file's services.
func serviceDigests(prev, c *LoadedConfig, changed map[string]bool) map[string]uint64 {
	if prev == nil || prev.digests == nil || changed == nil {
		out := make(map[string]uint64, len(c.Services))
		for _, s := range c.Services {
			out[s.Name] = s.Digest()
		}
		return out
	}
	out := maps.Clone(prev.digests)
	for name := range changed {
		delete(out, name)
	}
	for _, s := range c.named(changed) {
		out[s.Name] = s.Digest()
	}
	return out
}

// ConfigDigest is what the director advertises of cfg's services.
func (c *LoadedConfig) ConfigDigest() *cluster.ConfigDigest {
	return cluster.NewConfigDigest(config.DigestScheme, c.digests)
}
