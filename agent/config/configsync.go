package config

import (
	"fmt"
	"slices"
)

// clusterConfigSync checks cluster.config_sync and config_sources. Sync
// needs identities enforced, since a record counts only with its
// publisher's signature, and an explicit list of sources: a director
// that should only receive must not be able to change every other one.
func (d *doc) clusterConfigSync(c *Cluster, raw *rawCluster) {
	c.ConfigSync = raw.ConfigSync
	if !raw.ConfigSync {
		if raw.ConfigSources != nil {
			d.Errorf("$.cluster.config_sources", "config_sources is set but config_sync is not true: set config_sync: true, or remove config_sources")
		}
		return
	}
	if raw.Directors == nil {
		d.Errorf("$.cluster.config_sync", "config_sync needs identities: set cluster.directors (every director's public key) and identity_file, so that each published file is signed by its publisher")
	}
	if len(raw.ConfigSources) == 0 {
		d.Errorf("$.cluster.config_sync", "config_sync needs config_sources: the node names of the directors whose services directory is published to the others")
		return
	}
	for i, name := range raw.ConfigSources {
		path := fmt.Sprintf("$.cluster.config_sources[%d]", i)
		switch {
		case slices.Contains(raw.ConfigSources[:i], name):
			d.Errorf(path, "config source %q is listed twice", name)
		case raw.Directors != nil:
			if _, ok := raw.Directors[name]; !ok {
				d.Errorf(path, "config source %q is not in cluster.directors: its signature could not be checked", name)
			}
		}
	}
	c.ConfigSources = slices.Clone(raw.ConfigSources)
}
