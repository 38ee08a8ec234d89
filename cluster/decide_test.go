package cluster

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

var (
	vip1 = netip.MustParseAddr("10.0.0.50")
	vip2 = netip.MustParseAddr("10.0.0.51")
)

// cand builds a ready candidate configured for vips, holding those in held.
func cand(name string, prio int, vips []netip.Addr, held ...netip.Addr) Candidate {
	c := Candidate{Name: name, Priority: prio, Ready: true, VIPs: map[netip.Addr]bool{}}
	for _, v := range vips {
		c.VIPs[v] = slices.Contains(held, v)
	}
	return c
}

func TestOwnersActiveStandby(t *testing.T) {
	both := []netip.Addr{vip1, vip2}
	r := Rules{Mode: ActiveStandby, Preempt: true, Quorum: 1}
	cases := []struct {
		name string
		r    Rules
		live []Candidate
		want map[netip.Addr]string
	}{
		{"highest priority owns all", r, []Candidate{cand("a", 100, both), cand("b", 200, both), cand("c", 50, both)},
			map[netip.Addr]string{vip1: "b", vip2: "b"}},
		{"equal priority: lowest name", r, []Candidate{cand("b", 100, both), cand("a", 100, both)},
			map[netip.Addr]string{vip1: "a", vip2: "a"}},
		{"preempt takes from a live holder", r, []Candidate{cand("a", 100, both, vip1, vip2), cand("b", 200, both)},
			map[netip.Addr]string{vip1: "b", vip2: "b"}},
		{"without preempt the live holder keeps", Rules{Mode: ActiveStandby, Quorum: 1},
			[]Candidate{cand("a", 100, both, vip1, vip2), cand("b", 200, both)},
			map[netip.Addr]string{vip1: "a", vip2: "a"}},
		{"without preempt and no holder: the best", Rules{Mode: ActiveStandby, Quorum: 1},
			[]Candidate{cand("a", 100, both), cand("b", 200, both)},
			map[netip.Addr]string{vip1: "b", vip2: "b"}},
		{"not ready does not own", r, []Candidate{cand("a", 100, both), {Name: "b", Priority: 200, VIPs: map[netip.Addr]bool{vip1: false, vip2: false}}},
			map[netip.Addr]string{vip1: "a", vip2: "a"}},
		{"only directors configured for a VIP own it", r, []Candidate{cand("a", 100, both), cand("b", 200, []netip.Addr{vip2})},
			map[netip.Addr]string{vip1: "a", vip2: "b"}},
		{"below quorum nobody owns", Rules{Mode: ActiveStandby, Preempt: true, Quorum: 3},
			[]Candidate{cand("a", 100, both), cand("b", 200, both)}, map[netip.Addr]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Owners(c.r, c.live, both); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// MetalLB's order: the first of sha256(node + "#" + vip), ascending.
func TestOwnersActiveActiveRank(t *testing.T) {
	names := []string{"director", "director2", "director3"}
	var vips []netip.Addr
	for i := range 60 {
		vips = append(vips, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	r := Rules{Mode: ActiveActive, Preempt: true, Quorum: 2}
	var live []Candidate
	for _, n := range names {
		live = append(live, cand(n, 0, vips))
	}
	owners := Owners(r, live, vips)
	count := map[string]int{}
	for _, v := range vips {
		best := slices.MinFunc(names, func(a, b string) int {
			ra, rb := rank(a, v), rank(b, v)
			return slices.Compare(ra[:], rb[:])
		})
		if owners[v] != best {
			t.Fatalf("%s owned by %s, want %s (first by sha256)", v, owners[v], best)
		}
		count[owners[v]]++
	}
	for _, n := range names {
		if count[n] < 10 {
			t.Errorf("%s owns %d of 60 VIPs; the ranking should spread them (%v)", n, count[n], count)
		}
	}
	// One director fails: only its VIPs move.
	after := Owners(r, live[:2], vips)
	for _, v := range vips {
		if owners[v] != "director3" && after[v] != owners[v] {
			t.Errorf("%s moved from %s to %s although its owner is alive", v, owners[v], after[v])
		}
		if owners[v] == "director3" && after[v] == "director3" {
			t.Errorf("%s still owned by the failed director", v)
		}
	}
}

// The six VIPs of the e2e TestActiveActive spread 2 ± 1 over the three
// directors; the e2e test relies on it.
func TestOwnersE2EVIPs(t *testing.T) {
	var vips []netip.Addr
	for i := range 6 {
		vips = append(vips, netip.AddrFrom4([4]byte{10, 0, 0, byte(60 + i)}))
	}
	var live []Candidate
	for _, n := range []string{"director", "director2", "director3"} {
		live = append(live, cand(n, 0, vips))
	}
	count := map[string]int{}
	for _, o := range Owners(Rules{Mode: ActiveActive, Preempt: true, Quorum: 2}, live, vips) {
		count[o]++
	}
	for _, n := range []string{"director", "director2", "director3"} {
		if count[n] < 1 || count[n] > 3 {
			t.Errorf("%s owns %d VIPs, want 2 ± 1: %v", n, count[n], count)
		}
	}
}

func TestNext(t *testing.T) {
	both := []netip.Addr{vip1, vip2}
	as := Rules{Mode: ActiveStandby, Preempt: true, Quorum: 2}
	cases := []struct {
		name      string
		r         Rules
		live      []Candidate // "a" is self
		hold      []netip.Addr
		waiting   []netip.Addr
		conflicts []netip.Addr
	}{
		{"owner takes what nobody holds", as, []Candidate{cand("a", 200, both), cand("b", 100, both)}, both, nil, nil},
		{"standby holds nothing", as, []Candidate{cand("a", 100, both), cand("b", 200, both, both...)}, nil, nil, nil},
		{"no quorum: release everything", as, []Candidate{cand("a", 200, both, both...)}, nil, nil, nil},
		{"owner waits while the old holder lets go", as, []Candidate{cand("a", 200, both), cand("b", 100, both, vip1)},
			[]netip.Addr{vip2}, []netip.Addr{vip1}, nil},
		{"preempted holder releases", as, []Candidate{cand("a", 100, both, both...), cand("b", 200, both)}, nil, nil, nil},
		{"no preempt: holder keeps", Rules{Mode: ActiveStandby, Quorum: 2},
			[]Candidate{cand("a", 100, both, both...), cand("b", 200, both)}, both, nil, nil},
		{"both hold, a ranks first: a keeps", as, []Candidate{cand("a", 200, both, vip1), cand("b", 100, both, vip1)},
			both, nil, []netip.Addr{vip1}},
		// Views disagree (b ranks a first, a sees c it prefers): a still
		// lets go of what b holds when b ranks before it.
		{"both hold, other ranks first: let go", as,
			[]Candidate{cand("a", 100, both, vip1), cand("b", 200, both, vip1), {Name: "c", Priority: 300, VIPs: map[netip.Addr]bool{vip1: false}}},
			nil, nil, nil},
		{"a rising director's claim holds back a takeover", as,
			[]Candidate{cand("a", 200, both), cand("c", 50, both), {Name: "b", Priority: 300, Presence: Rising, VIPs: map[netip.Addr]bool{vip1: true, vip2: false}}},
			[]netip.Addr{vip2}, []netip.Addr{vip1}, nil},
		// a was cut off: b and c linger (or rise again). a keeps what it
		// holds but takes nothing without a quorum of settled directors.
		{"rising and lingering directors keep the quorum for holding, not for taking", Rules{Mode: ActiveStandby, Preempt: true, Quorum: 3},
			[]Candidate{cand("a", 100, both, vip1), {Name: "b", Priority: 200, Presence: Rising, VIPs: map[netip.Addr]bool{vip1: false, vip2: false}},
				{Name: "c", Priority: 300, Presence: Lingering, VIPs: map[netip.Addr]bool{vip2: true}}},
			[]netip.Addr{vip1}, nil, nil},
		// a is being cut off: b failed first, c is about to. c is unsure,
		// so a may not take b's VIP.
		{"no takeover with an unsure quorum", as,
			[]Candidate{cand("a", 100, both, vip1), {Name: "b", Priority: 200, Presence: Lingering},
				{Name: "c", Priority: 50, Ready: true, Presence: Unsure, VIPs: map[netip.Addr]bool{vip1: false, vip2: false}}},
			[]netip.Addr{vip1}, nil, nil},
		// The majority side: a lingering director's claims are void, its
		// VIPs are taken at once.
		{"a lingering holder's VIPs are taken", as,
			[]Candidate{cand("a", 100, both), cand("c", 50, both), {Name: "b", Priority: 200, Presence: Lingering, VIPs: map[netip.Addr]bool{vip1: true, vip2: true}}},
			both, nil, nil},
		{"a holder does not let go to a rising director", as,
			[]Candidate{cand("a", 200, both, vip1), cand("c", 50, both), {Name: "b", Priority: 300, Presence: Rising, VIPs: map[netip.Addr]bool{vip1: true}}},
			both, nil, []netip.Addr{vip1}},
		{"not ready: holds nothing", Rules{Mode: ActiveStandby, Preempt: true, Quorum: 1},
			[]Candidate{{Name: "a", Priority: 200, VIPs: map[netip.Addr]bool{vip1: false}}}, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := Next(c.r, "a", c.live, both)
			hold := sorted(slices.Collect(maps.Keys(st.Hold)))
			if fmt.Sprint(hold) != fmt.Sprint(sorted(c.hold)) || fmt.Sprint(st.Waiting) != fmt.Sprint(sorted(c.waiting)) ||
				fmt.Sprint(st.Conflicts) != fmt.Sprint(sorted(c.conflicts)) {
				t.Errorf("hold %v waiting %v conflicts %v; want %v, %v, %v", hold, st.Waiting, st.Conflicts, c.hold, c.waiting, c.conflicts)
			}
		})
	}
}

func sorted(a []netip.Addr) []netip.Addr {
	a = slices.Clone(a)
	slices.SortFunc(a, netip.Addr.Compare)
	return a
}

// Two directors that see each other never both keep a VIP: whatever else
// each sees, exactly one of them lets go.
func TestNextNeverTwoHolders(t *testing.T) {
	for _, mode := range []Mode{ActiveStandby, ActiveActive} {
		for _, preempt := range []bool{true, false} {
			r := Rules{Mode: mode, Preempt: preempt, Quorum: 1}
			a := cand("a", 100, []netip.Addr{vip1}, vip1)
			b := cand("b", 200, []netip.Addr{vip1}, vip1)
			c := cand("c", 300, []netip.Addr{vip1})
			// a sees c as well, b does not: the views differ.
			ha := Next(r, "a", []Candidate{a, b, c}, []netip.Addr{vip1}).Hold[vip1]
			hb := Next(r, "b", []Candidate{b, a}, []netip.Addr{vip1}).Hold[vip1]
			if ha && hb {
				t.Errorf("%s preempt=%v: both keep %s", mode, preempt, vip1)
			}
		}
	}
}

// ECMP: every ready director holds every VIP it serves, whatever the
// others hold, without a quorum; nothing is waited for or in conflict.
func TestNextECMP(t *testing.T) {
	both := []netip.Addr{vip1, vip2}
	r := Rules{Mode: ECMP, Quorum: 3}
	live := []Candidate{cand("a", 100, both, vip1, vip2), cand("b", 100, both, vip1, vip2)}
	st := Next(r, "b", live, both)
	if !st.Hold[vip1] || !st.Hold[vip2] || len(st.Waiting) != 0 || len(st.Conflicts) != 0 {
		t.Errorf("ready director: %+v", st)
	}
	live[1].Ready = false
	if st := Next(r, "b", live, both); len(st.Hold) != 0 {
		t.Errorf("during the start-up hold: %+v", st)
	}
	if o := Owners(r, live, both); len(o) != 0 {
		t.Errorf("owners %v: ECMP has none", o)
	}
}

// ECMP with homes (a director's FULLNAT source addresses): the home holds
// its own while it is ready; lost, the survivor ranked first takes them,
// one survivor only; back, the home waits for that survivor to let go and
// then takes them again. The VIPs stay with everyone throughout.
func TestNextECMPHomes(t *testing.T) {
	snatA, snatB := netip.MustParseAddr("10.0.0.201"), netip.MustParseAddr("10.0.0.202")
	all := []netip.Addr{vip1, snatA, snatB}
	r := Rules{Mode: ECMP, Quorum: 2, Homes: map[netip.Addr]string{snatA: "a", snatB: "b"}}
	holds := func(st Step) []netip.Addr { return slices.SortedFunc(maps.Keys(st.Hold), netip.Addr.Compare) }

	a, b, c := cand("a", 100, all, vip1, snatA), cand("b", 100, all, vip1, snatB), cand("c", 100, all, vip1)
	for _, tc := range []struct {
		self string
		want []netip.Addr
	}{{"a", []netip.Addr{vip1, snatA}}, {"b", []netip.Addr{vip1, snatB}}, {"c", []netip.Addr{vip1}}} {
		if got := holds(Next(r, tc.self, []Candidate{a, b, c}, all)); !slices.Equal(got, tc.want) {
			t.Errorf("all three live: %s holds %v, want %v", tc.self, got, tc.want)
		}
	}
	if o := Owners(r, []Candidate{a, b, c}, all); o[snatA] != "a" || o[snatB] != "b" || o[vip1] != "" {
		t.Errorf("owners %v", o)
	}

	// a is lost: exactly one of b and c takes snatA.
	survivors := []Candidate{b, c}
	takers := 0
	for _, self := range []string{"b", "c"} {
		if Next(r, self, survivors, all).Hold[snatA] {
			takers++
		}
	}
	if takers != 1 {
		t.Fatalf("%d survivors take a's addresses, want 1", takers)
	}
	owner := Owners(r, survivors, all)[snatA]

	// Another director joins while a survivor holds a's addresses: they
	// stay with that survivor, whatever the ranking.
	for _, newcomer := range []string{"d", "e", "f", "g"} {
		holderNow := cand(owner, 100, all, vip1, snatA)
		other := b
		if owner == "b" {
			other = c
		}
		live := []Candidate{holderNow, other, cand(newcomer, 100, all, vip1)}
		if !Next(r, owner, live, all).Hold[snatA] || Next(r, newcomer, live, all).Hold[snatA] {
			t.Errorf("%s joining moved a's addresses away from %s", newcomer, owner)
		}
	}

	// a is back and ready while the survivor still holds snatA: a waits,
	// the survivor lets go, then a takes it.
	holder := b
	if owner == "c" {
		holder = c
	}
	holder.VIPs[snatA] = true
	back := cand("a", 100, all, vip1)
	live := []Candidate{back, b, c}
	if st := Next(r, "a", live, all); st.Hold[snatA] || !slices.Contains(st.Waiting, snatA) || !st.Hold[vip1] {
		t.Errorf("a back while %s holds its addresses: %+v, want it to wait", owner, st)
	}
	if Next(r, owner, live, all).Hold[snatA] {
		t.Errorf("%s keeps a's addresses once a is back", owner)
	}
	holder.VIPs[snatA] = false
	if !Next(r, "a", live, all).Hold[snatA] {
		t.Error("a does not take its addresses back once they are free")
	}

	// Alone below the quorum, a director keeps serving the VIPs and its
	// own addresses but takes no other director's.
	if got := holds(Next(r, "c", []Candidate{c}, all)); !slices.Equal(got, []netip.Addr{vip1}) {
		t.Errorf("c alone holds %v", got)
	}
	if got := holds(Next(r, "b", []Candidate{cand("b", 100, all, vip1, snatB)}, all)); !slices.Equal(got, []netip.Addr{vip1, snatB}) {
		t.Errorf("b alone holds %v, want the VIP and its own addresses", got)
	}
}
