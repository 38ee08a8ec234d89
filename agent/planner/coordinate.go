package planner

import (
	"slices"
	"time"
)

// Coordinated changes: under cluster mode ecmp the routers spread a VIP's
// flows over every director, and a flow keeps its backend when it moves
// between directors only because all of them build the same Maglev table
// from the same service definition. A director that has loaded a changed
// definition therefore keeps the one in force until every live director
// advertises the new one, then switches; all of them see that at the same
// heartbeat, so they switch within one heartbeat and a pass of each other.
// Waiting is bounded: after Wait the change is applied anyway, and the
// directors that lag are named.

// PeerServices is what this director knows of one live peer's service
// configuration, compared with the one it has loaded and advertises.
type PeerServices struct {
	Name string
	// Known: the peer advertises per-service digests comparable with this
	// director's. A director of an earlier release advertises none: it is
	// not waited for (it would hold the change until Wait at every push).
	Known bool
	// Same: its whole configuration is this director's.
	Same bool
	// Compared: every one of its per-service digests was heard, so
	// Differ names every service that differs.
	Compared bool
	// Differ names the services defined differently on the peer, or on
	// one of the two only.
	Differ map[string]bool
}

// CoordinationInput is a change loaded and advertised but not in force,
// and what the live peers advertise.
type CoordinationInput struct {
	// Services are the services the change adds, removes or redefines,
	// by the names Differ uses.
	Services []string
	Peers    []PeerServices
	// Since is when the oldest part of the change was loaded; after Wait
	// from then it is applied whatever the peers advertise.
	Since, Now time.Time
	Wait       time.Duration
	// Stale: the peers were compared with a digest this director
	// advertised before the change's (the cluster has not taken the new
	// one in yet), so none of them counts as having it, and even alone
	// the change waits for the cluster's next word.
	Stale bool
}

// CoordinationVerdict says whether to put a held change in force.
type CoordinationVerdict struct {
	// Switch: every live director that can tell has the change, or Wait
	// has passed (TimedOut).
	Switch   bool
	TimedOut bool
	// Lagging names, per service of the change, the live directors that
	// do not advertise its new definition yet (or not all of their
	// services were heard yet), sorted; empty when none lags.
	Lagging map[string][]string
	// Unknown are the live directors whose configuration cannot be
	// compared, sorted: not waited for.
	Unknown []string
}

// Coordinate decides whether a held change goes in force now. Pure.
func Coordinate(in CoordinationInput) CoordinationVerdict {
	v := CoordinationVerdict{Lagging: map[string][]string{}}
	for _, p := range in.Peers {
		switch {
		case !p.Known:
			v.Unknown = append(v.Unknown, p.Name)
			continue
		case p.Same && !in.Stale:
			continue
		}
		for _, s := range in.Services {
			// Not heard in full, a service absent from Differ may yet
			// differ: only a complete comparison clears it.
			if in.Stale || p.Differ[s] || !p.Compared {
				v.Lagging[s] = append(v.Lagging[s], p.Name)
			}
		}
	}
	for _, names := range v.Lagging {
		slices.Sort(names)
	}
	slices.Sort(v.Unknown)
	v.Switch = len(v.Lagging) == 0 && !in.Stale
	if !v.Switch && !in.Now.Before(in.Since.Add(in.Wait)) {
		v.Switch, v.TimedOut = true, true
	}
	return v
}

// LaggingDirectors are the directors named in lagging, sorted, each once.
func LaggingDirectors(lagging map[string][]string) []string {
	var out []string
	for _, names := range lagging {
		out = append(out, names...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
