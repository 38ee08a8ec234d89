package agent

import (
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/statefile"
)

const overridesFile = "backends.json"

type overrideRecord struct {
	Backends []planner.BackendOverride `json:"backends"`
}

// LoadOverrides reads the overrides recorded under stateDir (none when
// there is no record).
func LoadOverrides(stateDir string) (planner.Overrides, error) {
	var rec overrideRecord
	if err := statefile.Load(stateDir, overridesFile, &rec); err != nil {
		return nil, err
	}
	out := planner.Overrides{}
	for _, ov := range rec.Backends {
		if !ov.Empty() {
			out[ov.Key()] = ov
		}
	}
	return out, nil
}

// SaveOverrides records o under stateDir, atomically.
func SaveOverrides(stateDir string, o planner.Overrides) error {
	return statefile.Save(stateDir, overridesFile, overrideRecord{Backends: o.List()})
}
