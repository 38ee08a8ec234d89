package config

import (
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// CoordinatedChanges is the `cluster.coordinated_changes` block: under
// mode ecmp every director builds the same Maglev table from the same
// service definition, so a changed definition is put in force by all of
// them together. A director that has loaded a changed service keeps the
// last definition every live director agreed on until each of them
// advertises the new one (or Wait has passed, when it applies the change
// anyway and says which directors lag).
type CoordinatedChanges struct {
	Enabled bool
	Wait    time.Duration
}

// DefaultCoordinatedWait outlasts a rolling push that gives one director
// after another the new files a few seconds apart (a configuration
// management run over three directors at 5 s each takes 10 s to reach the
// last one), with room for a slow one; two heartbeats (400 ms under ecmp)
// would give up before the second director got the change.
const DefaultCoordinatedWait = 30 * time.Second

type rawCoordinated struct {
	Enabled *bool        `yaml:"enabled"`
	Wait    yamldoc.Text `yaml:"wait"`
}

// coordinatedChanges is the block with its defaults: on under mode ecmp,
// where it is the only mode it is allowed in (in the others one director
// serves each VIP at a time, and there is nothing to agree on).
func (d *doc) coordinatedChanges(mode ClusterMode, raw *rawCoordinated) CoordinatedChanges {
	c := CoordinatedChanges{Enabled: mode == ModeECMP, Wait: DefaultCoordinatedWait}
	if raw == nil {
		return c
	}
	if raw.Enabled != nil {
		if *raw.Enabled && mode != ModeECMP {
			d.Errorf("$.cluster.coordinated_changes.enabled", "coordinated_changes is for cluster mode ecmp (mode is %s): "+
				"in the other modes one director serves a VIP at a time", mode)
		}
		c.Enabled = *raw.Enabled && mode == ModeECMP
	}
	c.Wait = d.clusterDuration("coordinated_changes.wait", string(raw.Wait), DefaultCoordinatedWait, time.Second, 10*time.Minute)
	return c
}
