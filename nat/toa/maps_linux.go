package toa

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// syncSet makes the keys of a map whose values are one byte exactly keys.
func syncSet[K comparable](m *ebpf.Map, keys []K) error {
	have, err := mapKeys[K](m)
	if err != nil {
		return err
	}
	for _, k := range have {
		if !slices.Contains(keys, k) {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("toa: deleting from %s: %w", name(m), err)
			}
		}
	}
	for _, k := range keys {
		if !slices.Contains(have, k) {
			if err := m.Put(k, uint8(1)); err != nil {
				return fmt.Errorf("toa: adding to %s: %w", name(m), err)
			}
		}
	}
	return nil
}

func mapKeys[K any](m *ebpf.Map) ([]K, error) {
	var (
		keys []K
		k    K
		v    uint8
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("toa: reading %s: %w", name(m), err)
	}
	return keys, nil
}

func name(m *ebpf.Map) string {
	if info, err := m.Info(); err == nil {
		return info.Name
	}
	return "a map"
}

// sumCounters adds up the first n per-CPU counters of an array.
func sumCounters(m *ebpf.Map, n uint32) ([]uint64, error) {
	out := make([]uint64, n)
	for i := range n {
		var perCPU []uint64
		if err := m.Lookup(i, &perCPU); err != nil {
			return nil, fmt.Errorf("toa: reading counter %d of %s: %w", i, name(m), err)
		}
		for _, v := range perCPU {
			out[i] += v
		}
	}
	return out, nil
}

// unpinAll unpins maps and removes dir with everything else pinned in it.
func unpinAll(dir string, maps ...*ebpf.Map) error {
	var errs []error
	for _, m := range maps {
		if err := m.Unpin(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("toa: removing %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// pinFolder makes root/sub, where the objects are pinned, and says so
// plainly when root is not on a BPF file system: pinning needs one, and
// without it mkdir or the pin fails with a bare errno.
func pinFolder(root, sub string) (string, error) {
	dir := filepath.Join(root, sub)
	mkErr := os.MkdirAll(dir, 0o700)
	existing := dir
	for {
		if _, err := os.Stat(existing); err == nil || existing == filepath.Dir(existing) {
			break
		}
		existing = filepath.Dir(existing)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(existing, &st); err == nil && st.Type != unix.BPF_FS_MAGIC {
		return "", fmt.Errorf("toa: %s is not on a BPF file system, where the programs' objects are pinned: mount one (mount -t bpf bpf /sys/fs/bpf; systemd does at boot)", root)
	}
	if mkErr != nil {
		return "", fmt.Errorf("toa: pin folder: %w", mkErr)
	}
	return dir, nil
}
