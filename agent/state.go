package agent

import (
	"slices"

	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/ipvs"
)

const ownershipFile = "owned.json"

// LoadOwnership reads what a previous run of lvsd created. A missing file
// means nothing is owned yet (first start).
func LoadOwnership(stateDir string) (Ownership, error) {
	var o Ownership
	if err := statefile.Load(stateDir, ownershipFile, &o); err != nil {
		return Ownership{}, err
	}
	slices.SortFunc(o.Services, ipvs.ServiceKey.Compare)
	return o, nil
}

// SaveOwnership records what lvsd owns, atomically.
func SaveOwnership(stateDir string, o Ownership) error {
	return statefile.Save(stateDir, ownershipFile, o)
}
