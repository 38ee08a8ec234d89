package agent

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/ipvs"
)

// The unwanted services the agent keeps from pass to pass, looking only at
// what each pass read back, are those a look at every service finds:
// through edits, removed services draining, and services of others coming
// and going in the kernel (seen when a pass reads the table).
func TestUnwantedFollowsEveryPass(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(16, 1))
	ctx := context.Background()
	body := func(i, backend int) string {
		return fmt.Sprintf("service: s%d\nvip: 10.0.0.5%d\nports: [%d]\nbackends:\n  - {address: 10.1.0.%d}\n", i, i%3, 80+i, backend)
	}
	foreign := func(i int) ipvs.Service {
		return ipvs.Service{ServiceKey: ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr(fmt.Sprintf("10.0.0.5%d", i%3)), Port: uint16(9000 + i)}, Scheduler: "wlc"}
	}
	for i := range 4 {
		e.service(fmt.Sprintf("s%d", i), body(i, 1))
	}
	a := e.agent()
	e.reconcile(a)
	seen := map[string]int{}
	for round := range 300 {
		i := rng.IntN(6)
		path := filepath.Join(e.dir, "services.d", fmt.Sprintf("s%d.yaml", i))
		switch step := rng.IntN(5); step {
		case 0:
			e.service(fmt.Sprintf("s%d", i), body(i, 1+rng.IntN(3)))
			a.reload("file change", []string{path})
		case 1:
			os.Remove(path)
			a.reload("file change", []string{path})
		case 2:
			e.ipvs.AddService(ctx, foreign(i%2))
		case 3:
			e.ipvs.DeleteService(ctx, foreign(0).ServiceKey)
			e.ipvs.DeleteService(ctx, foreign(1).ServiceKey)
		case 4:
			a.pending.table = true // as the audit does
		}
		e.now = e.now.Add(time.Duration(rng.IntN(20)) * time.Second) // drains run out
		e.reconcile(a)
		want := planner.UnwantedIn(a.desired, a.actual)
		if !maps.Equal(a.unwanted, want) {
			t.Fatalf("round %d: the agent kept %v unwanted, a look at every service finds %v", round, a.unwanted, want)
		}
		seen[fmt.Sprint(len(want) > 0)]++
	}
	if seen["true"] < 30 || seen["false"] < 30 {
		t.Errorf("rounds with and without unwanted services: %v; the steps no longer exercise both", seen)
	}
}
