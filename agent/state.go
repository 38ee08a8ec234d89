package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/lvsd/lvsd/ipvs"
)

const ownershipFile = "owned.json"

// LoadOwnership reads what a previous run of lvsd created. A missing file
// means nothing is owned yet (first start).
func LoadOwnership(stateDir string) (Ownership, error) {
	var o Ownership
	path := filepath.Join(stateDir, ownershipFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return o, err
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return o, fmt.Errorf("%s: %w", path, err)
	}
	slices.SortFunc(o.Services, ipvs.ServiceKey.Compare)
	return o, nil
}

// SaveOwnership records what lvsd owns, atomically: a crash leaves either the
// old or the new record, never a torn one.
func SaveOwnership(stateDir string, o Ownership) error {
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		return err
	}
	data, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(stateDir, ownershipFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(stateDir, ownershipFile))
}
