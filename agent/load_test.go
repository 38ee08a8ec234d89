package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// A reload of a few files names the changed services from what it read
// again and what that replaced, without comparing every file: whatever the
// edits (files written, rewritten as they were, removed, created), that is
// what comparing the old and new lists of files finds.
func TestChangedServicesOfAPatch(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(21, 12))
	body := func(i int) string {
		return fmt.Sprintf("service: s%d\nvip: 10.0.0.50\nports: [%d]\nbackends: [{address: 10.1.0.%d}]\n", i, 1000+i, 1+rng.IntN(3))
	}
	for i := range 10 {
		e.service(fmt.Sprintf("f%02d", i), body(i))
	}
	l := NewReloader(filepath.Join(e.dir, "lvsd.yaml"))
	prev, _, err := l.Reload(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	patched := 0
	for round := range 300 {
		var changed []string
		for range 1 + rng.IntN(3) {
			i := rng.IntN(14)
			changed = append(changed, e.rewriteOrRemove(rng, fmt.Sprintf("f%02d", i), func() string { return body(i) }))
		}
		next, ch, err := l.Reload(prev, changed)
		if err != nil {
			t.Fatal(err)
		}
		want := changedServices(prev.files, servicesdir.Set{Files: next.files})
		if !maps.Equal(ch.Services, want) {
			t.Fatalf("round %d, %q changed: named %v, the file lists differ in %v", round, changed, ch.Services, want)
		}
		if ch.Fresh != nil {
			patched++
		}
		prev = next
	}
	if patched < 250 {
		t.Errorf("%d of 300 reloads were patches", patched)
	}
}
