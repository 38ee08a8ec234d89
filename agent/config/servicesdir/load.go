package servicesdir

import "github.com/lvsd/lvsd/agent/config"

// LoadDir reads every service file of dir (see Cache.serviceFiles), in
// name order, and validates each service and the set as a whole.
func LoadDir(dir string) ([]*config.Service, error) {
	set, err := NewCache().LoadDir(dir)
	return set.Services, err
}

// Load reads the services directory of agent a (LoadDir), under its
// strict_modes.
func Load(a *config.Agent) ([]*config.Service, error) {
	set, err := NewCache().Load(a, nil)
	return set.Services, err
}

// LoadFiles reads and validates the named service files as one set.
func LoadFiles(files ...string) ([]*config.Service, error) {
	c := NewCache()
	cands := make([]candidate, len(files))
	for i, f := range files {
		cands[i] = candidate{path: f}
	}
	set, err := c.assemble(cands, nil)
	return set.Services, err
}
