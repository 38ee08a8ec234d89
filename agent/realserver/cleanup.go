package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/agent/planner"
)

// Cleanup undoes what lvsd did on this host, as recorded in stateDir: it
// takes down the tunnel devices it brought up (deletes those it created),
// removes the VIPs lvsd put on lo, closes its GUE ports, removes its
// nftables tables and TOA programs and writes back the values it found in the sysctls it
// changed, unless someone changed them since (theirs stay).
// Addresses and sysctls lvsd did not add are left alone. The drain state is
// kept. It reads the record of earlier releases too. It returns the ops
// applied.
//
// Run it with the agent stopped: a running agent would put everything back
// at its next pass.
func Cleanup(ctx context.Context, h Host, stateDir string) ([]planner.Op, error) {
	rec, err := LoadRecord(stateDir)
	if err != nil {
		return nil, fmt.Errorf("reading the real-server record: %w", err)
	}
	actual, _, err := h.ReadActual(ctx, planner.RealServerDesired{}, rec.Ownership)
	if err != nil {
		return nil, err
	}
	// Nothing desired: the plan removes what is recorded, tunnel devices
	// first.
	ops := planner.PlanRealServer(planner.RealServerDesired{}, actual, rec.Ownership)
	err = h.Apply(ctx, ops, &rec, func(r Record) error { return SaveRecord(stateDir, r) })
	if h.TOA != nil && h.TOA.Pinned() {
		// The programs are found by their pins, not the record: their
		// folder is lvsd's alone.
		if terr := h.TOA.Remove(ctx); terr != nil {
			err = errors.Join(err, fmt.Errorf("removing the TOA programs: %w", terr))
		} else {
			ops = append(ops, planner.Op{Kind: planner.RemoveTOA, Reason: "realserver.client_address", Detail: &planner.Detail{}})
		}
	}
	return ops, err
}
