package views

import (
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/planner"
)

// healthReader reads the health checker's states of keys (agent.Agent's
// HealthStates): f gets each, ok false for one it does not check.
type healthReader func(keys []string, f func(i int, st health.State, ok bool))

// healthReader is the agent's checker to read; nil without one. The views
// read the states of the backends they show, never a copy of every
// target's: at 100,000 targets that copy cost more than the rest of a
// status.
func (v *Views) healthReader() healthReader {
	if !v.a.ChecksHealth() {
		return nil
	}
	return v.a.HealthStates
}

// backendStates are the checker's states of some backends, read at once,
// by position in keys; found[i] is false when it has none for keys[i].
type backendStates struct {
	keys   []string
	states []health.State
	found  []bool
}

// read reads the states of keys with h (nil: none is found), reusing b's
// storage.
func (b *backendStates) read(h healthReader, keys []string) {
	b.keys = keys
	b.states = slices.Grow(b.states[:0], len(keys))[:len(keys)]
	b.found = slices.Grow(b.found[:0], len(keys))[:len(keys)]
	clear(b.found)
	if h == nil || len(keys) == 0 {
		return
	}
	h(keys, func(i int, st health.State, ok bool) {
		b.states[i], b.found[i] = st, ok
	})
}

// healthWord says the health of a backend as Status does: "" without
// checks (checked false), pending before the checker's first round (or
// when it has no state: ok false), else healthy or unhealthy; with the
// state, whose Weight is NoWeight when there is none.
func healthWord(checked bool, st health.State, ok bool) (string, health.State) {
	if !checked {
		return "", health.State{Weight: health.NoWeight}
	}
	if !ok {
		st.Weight = health.NoWeight
	}
	switch {
	case !ok || !st.Known:
		return healthPending, st
	case st.Healthy:
		return healthHealthy, st
	}
	return healthUnhealthy, st
}

// readWords reads the health of every checked configured destination of
// selected into r.words, from one read of the checker: a byte each, not a
// copy of every target's state. The keys are substrings of one string:
// 100,000 of them made one by one were 100,000 allocations.
func (r *statusReader) readWords(selected []*planner.VirtualService) {
	n, checked, size := 0, 0, 0
	for _, vs := range selected {
		for i := range vs.Destinations {
			// A backend without checks is skipped before its key is made:
			// the summary counts every destination.
			if vs.Destinations[i].From.Health != nil {
				checked++
				size += len(vs.Name) + len("/255.255.255.255:65535")
			}
		}
		n += len(vs.Destinations)
	}
	if checked == 0 {
		return
	}
	var sb strings.Builder
	sb.Grow(size)
	ends := make([]int, 0, checked) // of each key in sb
	at := make([]int32, 0, checked) // in r.words, of each key
	var buf [80]byte
	n = 0
	for _, vs := range selected {
		for i := range vs.Destinations {
			if d := &vs.Destinations[i]; d.From.Health != nil {
				sb.Write(vs.AppendBackend(buf[:0], *d))
				ends, at = append(ends, sb.Len()), append(at, int32(n+i))
			}
		}
		n += len(vs.Destinations)
	}
	all := sb.String()
	keys := make([]string, 0, checked)
	start, kept := 0, at[:0]
	for i, end := range ends {
		if key := all[start:end]; r.s.Config.HasChecks(key) {
			keys, kept = append(keys, key), append(kept, at[i])
		}
		start = end
	}
	r.words = make([]uint8, n)
	for _, j := range kept {
		r.words[j] = wordPending // the checker may not know it yet
	}
	if r.health != nil {
		r.health(keys, func(i int, st health.State, ok bool) {
			switch w, _ := healthWord(true, st, ok); w {
			case healthUnhealthy:
				r.words[kept[i]] = wordUnhealthy
			case healthPending:
				r.words[kept[i]] = wordPending
			default:
				r.words[kept[i]] = wordOther
			}
		})
	}
}

// What count needs of a destination's health word (statusReader.words).
const (
	wordOther = iota // healthy, or no checks
	wordPending
	wordUnhealthy
)
