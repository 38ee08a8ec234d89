package agent

import (
	"context"
	"errors"
	"slices"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
)

const (
	servicesFile  = "owned.json"
	addressesFile = "addresses.json"
)

// LoadOwnedServices reads the services a previous run of lvsd created. A
// missing file means nothing is owned yet (first start).
func LoadOwnedServices(stateDir string) (planner.Ownership, error) {
	var o planner.Ownership
	if err := statefile.Load(stateDir, servicesFile, &o); err != nil {
		return planner.Ownership{}, err
	}
	slices.SortFunc(o.Services, ipvs.ServiceKey.Compare)
	return planner.Ownership{Services: o.Services}, nil
}

// LoadOwnedAddresses reads the addresses a previous run of lvsd added.
// Versions before addresses.json kept them in owned.json.
func LoadOwnedAddresses(stateDir string) (planner.Ownership, error) {
	var o planner.Ownership
	err := statefile.Load(stateDir, addressesFile, &o)
	if err == nil && o.Addresses == nil {
		err = statefile.Load(stateDir, servicesFile, &o)
	}
	if err != nil {
		return planner.Ownership{}, err
	}
	return planner.Ownership{Addresses: o.Addresses}, nil
}

// SaveOwnedServices records the services lvsd owns, atomically.
func SaveOwnedServices(stateDir string, o planner.Ownership) error {
	return statefile.Save(stateDir, servicesFile, planner.Ownership{Services: o.Services})
}

// SaveOwnedAddresses records the addresses lvsd owns, atomically.
func SaveOwnedAddresses(stateDir string, o planner.Ownership) error {
	return statefile.Save(stateDir, addressesFile, planner.Ownership{Addresses: slices.Clone(o.Addresses)})
}

// Run is Apply as an apply.Executor: each op's error, and whether its
// object is gone, for the ownership record.
func (k Kernel) Run(ctx context.Context, ops []planner.Op) (errs []error, gone []bool) {
	errs = k.Apply(ctx, ops)
	return errs, goneAfter(ops, errs)
}

// goneAfter says, op by op, whether the object a delete was for is no longer in
// the kernel: deleted now, or found already gone (Ownership.After).
func goneAfter(ops []planner.Op, errs []error) []bool {
	out := make([]bool, len(ops))
	for i, op := range ops {
		err := errs[i]
		switch op.Kind {
		case planner.DeleteService:
			out[i] = err == nil || errors.Is(err, ipvs.ErrNotFound)
		case planner.DeleteAddress:
			out[i] = err == nil || errors.Is(err, arp.ErrNotFound)
		}
	}
	return out
}
