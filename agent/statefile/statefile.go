// Package statefile keeps small JSON records under lvsd's state directory:
// what the agent created, so that it only ever touches its own objects.
// Writes are atomic; a missing record is an empty one.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Load decodes dir/name into v. A missing file leaves v as it is (first
// start); a corrupt one is an error, since guessing could make lvsd remove
// what is not its own.
func Load(dir, name string, v any) error {
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Save writes v to dir/name atomically: a crash leaves the old or the new
// record, never a torn one.
func Save(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(filepath.Join(dir, name), append(data, '\n'), 0o600)
}

// WriteAtomic writes data to path with mode perm through a hidden
// temporary file in the same directory, synced, then renamed: a reader or
// a crash sees the old content or the new one, never a torn file.
func WriteAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
