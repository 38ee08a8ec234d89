package views

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// View says how much of the selected services Status reports. At 10,000
// services × 10 backends the full answer is 30 MB of JSON, seconds to
// build, send and print under emulation; the summary costs a few counters
// per service and lists only the services that need a look.
type View string

// Views of Status.
const (
	// ViewFull: every selected service with its destinations (the default).
	ViewFull View = "full"
	// ViewServices: every selected service with its backend counts, no
	// destinations (the metrics' per-service mode).
	ViewServices View = "services"
	// ViewSummary: the totals, and the first ProblemsListed services with a
	// problem, worst first, with their destinations.
	ViewSummary View = "summary"
	// ViewProblems: the totals, and every service with a problem.
	ViewProblems View = "problems"
	// ViewAuto: full up to SummaryAbove IPVS services, else summary (what
	// `lvsd status` asks for).
	ViewAuto View = "auto"
)

// SummaryAbove is how many IPVS services ViewAuto shows in full; more get
// the summary.
const SummaryAbove = 100

// ProblemsListed is how many services with a problem ViewSummary lists.
const ProblemsListed = 20

// ParseView reads a view's name; "" is ViewFull.
func ParseView(s string) (View, error) {
	switch v := View(s); v {
	case "":
		return ViewFull, nil
	case ViewFull, ViewServices, ViewSummary, ViewProblems, ViewAuto:
		return v, nil
	}
	return "", fmt.Errorf("%w: view %q is not full, services, summary, problems or auto", errBadQuery, s)
}

// resolve turns ViewAuto into the view for n selected IPVS services.
func (v View) resolve(n int) View {
	if v == ViewAuto {
		if n <= SummaryAbove {
			return ViewFull
		}
		return ViewSummary
	}
	return v
}

// lists reports whether the view lists a service with this problem rank
// (noProblem: none); summary lists only the first ProblemsListed.
func (v View) lists(rank int) bool {
	return rank != noProblem || (v != ViewSummary && v != ViewProblems)
}

// destinations reports whether the view shows the listed services'
// destinations.
func (v View) destinations() bool { return v != ViewServices }

// errBadQuery marks a query Status cannot answer as asked (HTTP 400).
var errBadQuery = errors.New("bad status query")

// BackendCounts adds up the destinations of one IPVS service, or of all
// the selected ones (StatusTotals).
type BackendCounts struct {
	Total int `json:"total"` // configured, and removed but still draining
	// Eligible take new connections: their kernel weight is above 0.
	Eligible    int `json:"eligible"`
	Unhealthy   int `json:"unhealthy"`
	Pending     int `json:"health_pending"`
	NotInKernel int `json:"not_in_kernel"` // configured, missing from the kernel
	Draining    int `json:"draining"`      // removed from the configuration, in the kernel until drained
	// Connection entries and traffic counters of the destinations in the
	// kernel (a deleted destination takes its counts with it).
	ActiveConns   int    `json:"active_conns"`
	InactiveConns int    `json:"inactive_conns"`
	Connections   uint64 `json:"connections_total"`
	PacketsIn     uint64 `json:"packets_in"`
	PacketsOut    uint64 `json:"packets_out"`
	BytesIn       uint64 `json:"bytes_in"`
	BytesOut      uint64 `json:"bytes_out"`
	// Rates add up the destinations' rate estimates, as the counters.
	Rates Rates `json:"rates"`
}

func (c *BackendCounts) add(o BackendCounts) {
	c.Total, c.Eligible, c.Unhealthy, c.Pending = c.Total+o.Total, c.Eligible+o.Eligible, c.Unhealthy+o.Unhealthy, c.Pending+o.Pending
	c.NotInKernel, c.Draining = c.NotInKernel+o.NotInKernel, c.Draining+o.Draining
	c.ActiveConns, c.InactiveConns = c.ActiveConns+o.ActiveConns, c.InactiveConns+o.InactiveConns
	c.addStats(spec.Stats{Connections: o.Connections, PacketsIn: o.PacketsIn, PacketsOut: o.PacketsOut,
		BytesIn: o.BytesIn, BytesOut: o.BytesOut})
	c.Rates.add(o.Rates)
}

func (c *BackendCounts) addStats(s spec.Stats) {
	c.Connections, c.PacketsIn, c.PacketsOut = c.Connections+s.Connections, c.PacketsIn+s.PacketsIn, c.PacketsOut+s.PacketsOut
	c.BytesIn, c.BytesOut = c.BytesIn+s.BytesIn, c.BytesOut+s.BytesOut
}

// StatusTotals add up the selected services.
type StatusTotals struct {
	Services     int `json:"services"`      // configured services (names)
	IPVSServices int `json:"ipvs_services"` // a service with several ports is several
	InKernel     int `json:"in_kernel"`
	VIPs         int `json:"vips"`
	VIPsHeld     int `json:"vips_held"`
	// Problems counts the IPVS services with a problem (ServiceStatus.Problem).
	Problems int           `json:"problems"`
	Backends BackendCounts `json:"backends"`
}

// Problems of a service, worst first.
const (
	problemNotInKernel     = iota // the IPVS service is missing
	problemNoneEligible           // no destination takes new connections: new clients are refused
	problemBackendsMissing        // configured destinations missing from the kernel
	problemUnhealthy              // some backends fail their checks
	noProblem
)

// problem ranks what is wrong with an IPVS service and says it in words.
func problem(inKernel bool, c BackendCounts) (int, string) {
	switch {
	case !inKernel:
		return problemNotInKernel, "not in the kernel"
	case c.Eligible == 0:
		return problemNoneEligible, "no backend takes new connections"
	case c.NotInKernel > 0:
		return problemBackendsMissing, plural(c.NotInKernel, "backend") + " not in the kernel"
	case c.Unhealthy > 0:
		return problemUnhealthy, plural(c.Unhealthy, "backend") + " unhealthy"
	}
	return noProblem, ""
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// selectServices returns the configured IPVS services whose name matches
// one of patterns (names or path.Match globs; none: every service), in the
// configuration's order, and how many configured services match.
func selectServices(cfg *agent.LoadedConfig, patterns []string) ([]*planner.VirtualService, int, error) {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, 0, fmt.Errorf("%w: service pattern %q: %v", errBadQuery, p, err)
		}
	}
	matched := make([]bool, len(patterns))
	names := 0
	for _, s := range cfg.Services {
		if matchAny(patterns, s.Name, matched) {
			names++
		}
	}
	var none []string
	for i, p := range patterns {
		if !matched[i] {
			none = append(none, fmt.Sprintf("%q", p))
		}
	}
	if len(none) > 0 {
		return nil, 0, fmt.Errorf("%w: no configured service is named or matches %s", errBadQuery, strings.Join(none, ", "))
	}
	var selected []*planner.VirtualService
	all := cfg.Desired.Services
	for i := range all {
		if !all[i].Internal && (len(patterns) == 0 || matchAny(patterns, all[i].Name, matched)) {
			selected = append(selected, all[i])
		}
	}
	return selected, names, nil
}

// matchAny reports whether name matches one of patterns (or there are
// none), marking each pattern that matched.
func matchAny(patterns []string, name string, matched []bool) bool {
	if len(patterns) == 0 {
		return true
	}
	hit := false
	for i, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			matched[i], hit = true, true
		}
	}
	return hit
}

// statusReader answers for the services of one snapshot: the kernel as
// read (now or by the passes), the addresses on the interface, health.
type statusReader struct {
	s       *agent.Snapshot
	actual  planner.Actual
	present map[netip.Addr]bool
	health  healthReader // nil: no checker
	// words are the health of every configured destination of the
	// selected services, in their order, for count: read at once; nil
	// when none is checked.
	words []uint8
	dst   backendStates // of the destinations of the service listed
	// vipInterfaces are the VIPs on an interface of their own (vipInterfaces).
	vipInterfaces map[netip.Addr]string
}

// eachDestination calls f for every destination of vs: the configured ones
// in their order with their kernel counterpart (k nil: not in the kernel),
// then those the kernel still has that are no longer configured (d nil).
func eachDestination(vs *planner.VirtualService, cur planner.ActualService, f func(d *planner.Destination, k *spec.Destination)) {
	kernel := cur.Destinations
	found := make([]bool, len(kernel))
	var index map[spec.DestinationKey]int
	for i := range vs.Destinations {
		d := &vs.Destinations[i]
		j := kernelPosition(kernel, d.Key(), len(vs.Destinations)-1-i)
		if j < 0 && len(kernel) > 16 { // a search is cheaper for the usual few
			if index == nil {
				index = make(map[spec.DestinationKey]int, len(kernel))
				for i, k := range kernel {
					index[k.DestinationKey] = i
				}
			}
			if at, ok := index[d.Key()]; ok {
				j = at
			}
		} else if j < 0 {
			j = slices.IndexFunc(kernel, func(k spec.Destination) bool { return k.DestinationKey == d.Key() })
		}
		if j < 0 {
			f(d, nil)
			continue
		}
		found[j] = true
		f(d, &kernel[j])
	}
	for j := range kernel {
		if !found[j] {
			f(nil, &kernel[j])
		}
	}
}

// kernelPosition returns where key is in kernel if it is at guess, -1 if
// not. The kernel lists destinations newest first and lvsd adds them in
// canonical order, so the configured i-th of n is usually (n-1-i)-th.
func kernelPosition(kernel []spec.Destination, key spec.DestinationKey, guess int) int {
	if guess >= 0 && guess < len(kernel) && kernel[guess].DestinationKey == key {
		return guess
	}
	return -1
}

// count adds up the destinations of vs, whose configured ones' health
// words are words (nil: none is checked).
func (r *statusReader) count(vs *planner.VirtualService, words []uint8) (BackendCounts, bool) {
	cur, inKernel := r.actual.Services.Get(vs.ServiceKey)
	var c BackendCounts
	i := 0 // configured destinations come in order
	eachDestination(vs, cur, func(d *planner.Destination, k *spec.Destination) {
		c.Total++
		if d == nil {
			c.Draining++
		} else {
			if words != nil {
				switch words[i] {
				case wordUnhealthy:
					c.Unhealthy++
				case wordPending:
					c.Pending++
				}
			}
			i++
		}
		if k == nil {
			c.NotInKernel++
			return
		}
		if k.Weight > 0 {
			c.Eligible++
		}
		c.ActiveConns, c.InactiveConns = c.ActiveConns+int(k.ActiveConns), c.InactiveConns+int(k.InactiveConns)
		traffic := k.Traffic()
		c.addStats(traffic)
		c.Rates.add(ratesOf(traffic.Rates))
	})
	return c, inKernel
}

// Health of a backend as Status says it.
const (
	healthHealthy   = "healthy"
	healthUnhealthy = "unhealthy"
	healthPending   = "pending" // no round finished yet
)

// listed is a selected service the view shows, with what count found.
type listed struct {
	vs       *planner.VirtualService
	counts   BackendCounts
	inKernel bool
	rank     int
	problem  string
}

// services adds up the selected services and returns those the view lists:
// all of them in the configuration's order, or those with a problem, worst
// first.
func (r *statusReader) services(selected []*planner.VirtualService, view View, now time.Time) (StatusTotals, []ServiceStatus) {
	t := StatusTotals{IPVSServices: len(selected)}
	vips := map[netip.Addr]bool{}
	var shown []listed
	r.readWords(selected)
	at := 0 // in r.words, of vs's
	for _, vs := range selected {
		var words []uint8
		if r.words != nil {
			words = r.words[at : at+len(vs.Destinations)]
		}
		at += len(vs.Destinations)
		c, inKernel := r.count(vs, words)
		rank, why := problem(inKernel, c)
		t.Backends.add(c)
		if inKernel {
			t.InKernel++
		}
		if rank != noProblem {
			t.Problems++
		}
		if vs.VIP.IsValid() && !vips[vs.VIP] {
			vips[vs.VIP] = true
			if r.present[vs.VIP] {
				t.VIPsHeld++
			}
		}
		if view.lists(rank) {
			shown = append(shown, listed{vs: vs, counts: c, inKernel: inKernel, rank: rank, problem: why})
		}
	}
	t.VIPs = len(vips)
	if view == ViewSummary || view == ViewProblems {
		slices.SortStableFunc(shown, func(a, b listed) int { return a.rank - b.rank })
	}
	if view == ViewSummary && len(shown) > ProblemsListed {
		shown = shown[:ProblemsListed]
	}
	out := make([]ServiceStatus, len(shown))
	for i, l := range shown {
		out[i] = r.service(l, view.destinations(), now)
	}
	return t, out
}

// service is the status of one listed service, with its destinations if
// withDests.
func (r *statusReader) service(l listed, withDests bool, now time.Time) ServiceStatus {
	vs := l.vs
	ss := ServiceStatus{Name: vs.Name, Key: vs.ServiceKey.String(), Scheduler: vs.Scheduler,
		VIP: vs.VIP.String(), Flags: vs.Flags.String(), InKernel: l.inKernel, VIPHeld: r.present[vs.VIP],
		Interface: r.vipInterfaces[vs.VIP],
		Rule:      r.s.Eligibility.At(vs.Name).Rule, Backends: l.counts, Problem: l.problem}
	if !withDests {
		return ss
	}
	ss.Destinations = make([]DestinationStatus, 0, l.counts.Total)
	keys := r.dst.keys[:0] // the last service's: one slice for all of them
	for _, d := range vs.Destinations {
		keys = append(keys, vs.Backend(d))
	}
	r.dst.read(r.health, keys)
	i := 0 // configured destinations come in order
	eachDestination(vs, r.actual.Services.At(vs.ServiceKey), func(d *planner.Destination, k *spec.Destination) {
		ss.Destinations = append(ss.Destinations, r.destination(vs, d, k, i, now))
		if d != nil {
			i++
		}
	})
	return ss
}

// destination is the status of a destination of vs: configured (d, the
// i-th, whose key and health are in r.dst), in the kernel (k), or both.
func (r *statusReader) destination(vs *planner.VirtualService, d *planner.Destination, k *spec.Destination, i int, now time.Time) DestinationStatus {
	var ds DestinationStatus
	if d != nil {
		ds = DestinationStatus{Address: d.Key().String(), Forwarding: vs.Kernel(*d).Method(), ConfiguredWeight: int(d.Weight), Weight: -1}
		key := r.dst.keys[i]
		ds.setHealth(r.s.Config.HasChecks(key), r.dst.states[i], r.dst.found[i], r.s.Eligibility.At(vs.Name), key)
		if ov, ok := r.s.Overrides[key]; ok {
			ds.Override = &ov
		}
	} else { // still in the kernel, no longer configured (or the sorry server)
		ds = DestinationStatus{Address: k.DestinationKey.String(), Forwarding: k.Method(), ConfiguredWeight: -1,
			ReportedWeight: health.NoWeight, Sorry: vs.IsSorry(k.DestinationKey)}
		if ds.Sorry && sorryWanted(r.s.Desired, vs.ServiceKey) {
			ds.ConfiguredWeight, ds.Eligible = int(vs.Sorry.Weight), true // no backend is
		}
		if since, ok := r.s.Drains[planner.DrainKey{Service: vs.ServiceKey, Destination: k.DestinationKey}]; ok {
			ds.DrainingFor = now.Sub(since).Round(time.Second).Seconds()
		}
	}
	if k != nil {
		ds.Weight, ds.ActiveConns, ds.InactiveConns = k.Weight, int(k.ActiveConns), int(k.InactiveConns)
		ds.setStats(k.Traffic())
	}
	return ds
}

// sorryWanted reports whether the service with key k has its sorry server
// among its destinations in d (with health applied): no backend is eligible.
func sorryWanted(d planner.Desired, k spec.ServiceKey) bool {
	vs, ok := planner.FindService(d, k)
	return ok && vs.Sorry != nil && slices.ContainsFunc(vs.Destinations, func(dst planner.Destination) bool { return vs.IsSorry(dst.Key()) })
}

func (d *DestinationStatus) setStats(s spec.Stats) {
	d.Connections, d.PacketsIn, d.PacketsOut, d.BytesIn, d.BytesOut =
		s.Connections, s.PacketsIn, s.PacketsOut, s.BytesIn, s.BytesOut
	d.Rates = ratesOf(s.Rates)
}

// setHealth fills in the health of the backend with HealthKey key of a
// service whose eligibility is elig: checked says it has checks, st is the
// checker's state of it (ok false: none).
func (d *DestinationStatus) setHealth(checked bool, st health.State, ok bool, elig planner.Eligibility, key string) {
	d.Eligible = elig.Eligible(key)
	d.Health, st = healthWord(checked, st, ok)
	d.ReportedWeight = st.Weight
	if d.Health == healthUnhealthy {
		d.HealthError = st.LastError
	}
}
