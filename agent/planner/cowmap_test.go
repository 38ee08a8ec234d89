package planner

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// A CopyOnWriteMap behaves as a map, and a clone as a copy of one: random writes
// to an original and its clones (and clones of clones) each see only their
// own, against plain maps doing the same.
func TestCowMapClonesAreCopies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	type pair struct {
		cow   CopyOnWriteMap[int, string]
		plain map[int]string
	}
	copies := []*pair{{plain: map[int]string{}}}
	for step := range 20000 {
		p := copies[rng.IntN(len(copies))]
		k := rng.IntN(2000)
		switch op := rng.IntN(10); {
		case op < 5:
			v := fmt.Sprint(step)
			p.cow.Set(k, v)
			p.plain[k] = v
		case op < 8:
			p.cow.Delete(k)
			delete(p.plain, k)
		case op < 9 && len(copies) < 12:
			copies = append(copies, &pair{cow: p.cow.Clone(), plain: maps.Clone(p.plain)})
		}
		if v, ok := p.cow.Get(k); v != p.plain[k] || ok != hasKey(p.plain, k) {
			t.Fatalf("step %d: Get(%d) = %q, %v; the map has %q", step, k, v, ok, p.plain[k])
		}
	}
	for i, p := range copies {
		got := maps.Collect(p.cow.All())
		if !maps.Equal(got, p.plain) || p.cow.Len() != len(p.plain) {
			t.Errorf("copy %d: %d entries (Len %d), the map %d; equal: %v", i, len(got), p.cow.Len(), len(p.plain), maps.Equal(got, p.plain))
		}
	}
	if len(copies) < 5 {
		t.Errorf("only %d copies made: the steps no longer exercise clones", len(copies))
	}
}

func hasKey(m map[int]string, k int) bool { _, ok := m[k]; return ok }

// A clone copies no entry, and a write after it copies one shard: what a
// pass that changes one service pays among 10,000.
func TestCowMapCloneCostsWhatChanges(t *testing.T) {
	var m CopyOnWriteMap[int, int]
	for i := range 10000 {
		m.Set(i, i)
	}
	allocs := testing.AllocsPerRun(20, func() {
		c := m.Clone()
		c.Set(5, 6)
	})
	// The clone's shard list and owned flags, and one shard's copy.
	if allocs > 8 {
		t.Errorf("clone and one write: %.0f allocations", allocs)
	}
	if v, _ := m.Get(5); v != 5 {
		t.Errorf("the original sees its clone's write: %d", v)
	}
}
