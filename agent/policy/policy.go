// Package policy decides which backends of a service may take new
// connections, exactly as seed 000 ("确定符合条件的后端", GCP passthrough
// network load balancing) specifies: health, weighted load balancing and the
// failover policy, with its ordered fallbacks when nothing is healthy. It is
// pure: no clock, no I/O.
package policy

// Backend is what the policy knows of one backend.
type Backend struct {
	Failover bool // in the failover pool; otherwise a primary backend
	Healthy  bool
	Weight   int // the weight the backend reports; read only when Policy.Weighted
}

// Policy is a service's configuration as far as eligibility goes.
type Policy struct {
	// Failover is true when the service has a failover policy (any backend
	// in a failover pool, or a failover block). Without one, every backend
	// is treated alike.
	Failover bool
	// Weighted turns on weighted load balancing: backends report weights
	// (X-Load-Balancing-Endpoint-Weight) and a zero weight ranks last.
	Weighted bool
	// Ratio is the failover ratio: the primaries stay eligible while
	// healthy primaries / all primaries >= Ratio. 0 keeps them while any is
	// healthy.
	Ratio float64
	// DropIfNoneHealthy makes the eligible set empty when nothing is
	// healthy (new connections are refused) instead of falling back. The
	// seed offers it with a failover policy; lvsd also applies it without
	// one, where a sorry server replaces the fallback.
	DropIfNoneHealthy bool
}

// Result is the decision: which backends are eligible, and the seed's rule
// that decided, for logs and the status view.
type Result struct {
	Eligible []bool
	Rule     string
}

// Count returns how many backends are eligible.
func (r Result) Count() int {
	n := 0
	for _, e := range r.Eligible {
		if e {
			n++
		}
	}
	return n
}

// Eligible applies the policy to bs (in any order; the result is aligned with bs).
func Eligible(p Policy, bs []Backend) Result {
	switch {
	case !p.Failover && p.DropIfNoneHealthy && !anyGood(bs, p.Weighted):
		return Result{make([]bool, len(bs)), "no failover policy: none healthy, drop new connections"}
	case !p.Failover && !p.Weighted:
		return noFailoverUnweighted(bs)
	case !p.Failover && p.Weighted:
		return firstNonEmpty(bs, "no failover policy, weighted",
			tier{"healthy, weight > 0", func(b Backend) bool { return b.Healthy && b.Weight > 0 }},
			tier{"unhealthy, weight > 0", func(b Backend) bool { return !b.Healthy && b.Weight > 0 }},
			tier{"healthy, weight 0", func(b Backend) bool { return b.Healthy && b.Weight == 0 }},
			tier{"unhealthy, weight 0", func(b Backend) bool { return !b.Healthy && b.Weight == 0 }},
		)
	case p.Failover && !p.Weighted:
		return withFailover(p, bs, "failover policy, unweighted", func(b Backend) bool { return b.Healthy },
			tier{"all primary backends", func(b Backend) bool { return !b.Failover }})
	default:
		return withFailover(p, bs, "failover policy, weighted", func(b Backend) bool { return b.Healthy && b.Weight > 0 },
			tier{"unhealthy primaries, weight > 0", func(b Backend) bool { return !b.Failover && !b.Healthy && b.Weight > 0 }},
			tier{"unhealthy failover backends, weight > 0", func(b Backend) bool { return b.Failover && !b.Healthy && b.Weight > 0 }},
			tier{"healthy primaries, weight 0", func(b Backend) bool { return !b.Failover && b.Healthy && b.Weight == 0 }},
			tier{"healthy failover backends, weight 0", func(b Backend) bool { return b.Failover && b.Healthy && b.Weight == 0 }},
			tier{"unhealthy primaries, weight 0", func(b Backend) bool { return !b.Failover && !b.Healthy && b.Weight == 0 }},
			tier{"unhealthy failover backends, weight 0", func(b Backend) bool { return b.Failover && !b.Healthy && b.Weight == 0 }},
		)
	}
}

// anyGood reports whether a backend is healthy (and, weighted, reports a
// weight above 0): the first choice of every rule.
func anyGood(bs []Backend, weighted bool) bool {
	for _, b := range bs {
		if b.Healthy && (!weighted || b.Weight > 0) {
			return true
		}
	}
	return false
}

// tier is one entry of an ordered list of candidate sets.
type tier struct {
	name string
	in   func(Backend) bool
}

func pick(bs []Backend, in func(Backend) bool) ([]bool, int) {
	out := make([]bool, len(bs))
	n := 0
	for i, b := range bs {
		if in(b) {
			out[i] = true
			n++
		}
	}
	return out, n
}

// "The eligible set depends only on health checks: when at least one
// backend is healthy, it holds all healthy backends; when all are
// unhealthy, it holds all backends."
func noFailoverUnweighted(bs []Backend) Result {
	if set, n := pick(bs, func(b Backend) bool { return b.Healthy }); n > 0 {
		return Result{set, "no failover policy, unweighted: all healthy backends"}
	}
	set, _ := pick(bs, func(Backend) bool { return true })
	return Result{set, "no failover policy, unweighted: none healthy, so all backends"}
}

// firstNonEmpty returns the first tier with a member ("the first non-empty
// of the following"); none at all gives an empty set.
func firstNonEmpty(bs []Backend, prefix string, tiers ...tier) Result {
	for _, t := range tiers {
		if set, n := pick(bs, t.in); n > 0 {
			return Result{set, prefix + ": " + t.name}
		}
	}
	return Result{make([]bool, len(bs)), prefix + ": no backends"}
}

// withFailover applies the failover rules with good deciding what counts as
// healthy (healthy, or healthy with a non-zero weight when weighted), and
// fallback as the ordered list used when no backend is good and new
// connections are not dropped.
func withFailover(p Policy, bs []Backend, prefix string, good func(Backend) bool, fallback ...tier) Result {
	goodPrimary, nGoodPrimary := pick(bs, func(b Backend) bool { return !b.Failover && good(b) })
	goodFailover, nGoodFailover := pick(bs, func(b Backend) bool { return b.Failover && good(b) })
	_, nPrimary := pick(bs, func(b Backend) bool { return !b.Failover })
	switch {
	case nGoodPrimary+nGoodFailover == 0 && p.DropIfNoneHealthy:
		return Result{make([]bool, len(bs)), prefix + ": none healthy, drop new connections"}
	case nGoodPrimary+nGoodFailover == 0:
		return firstNonEmpty(bs, prefix+": none healthy", fallback...)
	case nGoodPrimary == 0:
		return Result{goodFailover, prefix + ": no healthy primary, so the healthy failover backends"}
	case nGoodFailover == 0:
		return Result{goodPrimary, prefix + ": no healthy failover backend, so the healthy primaries"}
	case p.Ratio == 0:
		return Result{goodPrimary, prefix + ": ratio 0, so the healthy primaries"}
	case float64(nGoodPrimary)/float64(nPrimary) >= p.Ratio:
		return Result{goodPrimary, prefix + ": healthy primaries at or above the ratio"}
	}
	return Result{goodFailover, prefix + ": healthy primaries below the ratio, so the healthy failover backends"}
}

// Pool is the pool a failover policy's eligible set is drawn from.
type Pool int

// Pools. Every rule of a failover policy picks from one pool only.
const (
	PoolNone     Pool = iota // nothing eligible
	PoolPrimary              // primary backends
	PoolFailover             // the failover pool
)

func (p Pool) String() string { return [...]string{"none", "primary", "failover"}[p] }

// Pool says which pool r's eligible backends (aligned with bs) belong to:
// failover as soon as one failover backend is eligible.
func (r Result) Pool(bs []Backend) Pool {
	pool := PoolNone
	for i, e := range r.Eligible {
		switch {
		case e && bs[i].Failover:
			return PoolFailover
		case e:
			pool = PoolPrimary
		}
	}
	return pool
}
