package agent

import (
	"context"
	"sync"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/ipvs"
)

// minSpread is the shortest run of IPVS writes Apply spreads over several
// writers; a shorter one (a reload, a health change) goes one at a time,
// in the plan's order.
const minSpread = 64

// spreadable says whether an op is an IPVS write that touches its service
// only, so that runs of them for different services may go in any order.
// A move is not: it holds a global sysctl across its two writes.
func spreadable(k planner.OpKind) bool {
	switch k {
	case planner.AddService, planner.UpdateService, planner.DeleteService, planner.AddDestination, planner.UpdateDestination, planner.DeleteDestination:
		return true
	}
	return false
}

// applySpread runs a run of spreadable ops on k.IPVSWriters goroutines,
// each service's ops in their order on one of them, and sets every op's
// error.
func (k Kernel) applySpread(ctx context.Context, ops []planner.Op, errs []error) {
	var groups [][]int // op indexes, by service, in order of first appearance
	group := map[ipvs.ServiceKey]int{}
	for i, op := range ops {
		g, ok := group[op.Service.ServiceKey]
		if !ok {
			g = len(groups)
			group[op.Service.ServiceKey] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	next := make(chan []int)
	var wg sync.WaitGroup
	for range min(k.IPVSWriters, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				for _, i := range g {
					errs[i] = k.apply(ctx, ops[i])
				}
			}
		}()
	}
	for _, g := range groups {
		next <- g
	}
	close(next)
	wg.Wait()
}
