package toa

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
)

// An upgraded lvsd finds the previous release's programs attached and their
// maps pinned. It adopts the maps whose layout (type, key and value size,
// capacity, flags) this build kept, so the service sets and counters carry
// on, and puts its own programs in place of the attached ones that differ
// from them. The kernel's tag of a program, a hash of its instructions with
// the map references left out, tells whether an attached program is this
// build's: the same tag is the same program on the same maps.

// directorSpec is the embedded director program, parsed once.
var directorSpec = sync.OnceValues(loadDirector)

// learnt is directorTag's answer once it had one.
var learnt struct {
	sync.Mutex
	tag string
}

// directorTag is the kernel's tag of the embedded director program, for
// reads that load nothing lasting: learnt by loading it on maps of its
// own, unpinned, and closing it again; a failure is tried again at the
// next call. The tag cannot be computed from the object file: the loader
// rewrites the instructions (subprograms, CO-RE) and the kernel hashes
// what it was given.
func directorTag() (string, error) {
	learnt.Lock()
	defer learnt.Unlock()
	if learnt.tag != "" {
		return learnt.tag, nil
	}
	spec, err := directorSpec()
	if err != nil {
		return "", err
	}
	spec = spec.Copy()
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var objs directorObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return "", fmt.Errorf("toa: loading the director's program to learn its tag: %w", err)
	}
	defer objs.Close()
	learnt.tag, err = programTag(objs.ToaDirector)
	return learnt.tag, err
}

// programTag is the kernel's tag of a loaded program.
func programTag(p *ebpf.Program) (string, error) {
	info, err := p.Info()
	if err != nil {
		return "", fmt.Errorf("toa: reading the program's tag: %w", err)
	}
	return info.Tag, nil
}

// newLayouts unpins the maps in dir whose layout differs from spec's, so
// that loading spec creates them afresh rather than fail on them: the
// previous release's programs keep them as long as they stay attached. It
// returns the keys of those that are sets (a hash of one-byte values)
// whose key size this build kept, by name, to be put into the new maps
// (putKeys), and whether it unpinned any: then the new programs must
// replace the attached ones even where their instructions are the same.
// Counters and the real server's socket storage start empty.
func newLayouts(spec *ebpf.CollectionSpec, dir string) (map[string][][]byte, bool, error) {
	carried := map[string][][]byte{}
	replaced := false
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("toa: reading the pinned map %s: %w", path, err)
		}
		incompatible := ms.Compatible(m) != nil
		if incompatible && ms.Type == ebpf.Hash && ms.ValueSize == 1 && m.Type() == ebpf.Hash && m.KeySize() == ms.KeySize {
			carried[name], err = rawKeys(m)
		}
		m.Close()
		if err != nil {
			return nil, false, err
		}
		if incompatible {
			if err := os.Remove(path); err != nil {
				return nil, false, fmt.Errorf("toa: unpinning %s, whose layout changed: %w", path, err)
			}
			replaced = true
		}
	}
	return carried, replaced, nil
}

func rawKeys(m *ebpf.Map) ([][]byte, error) {
	var keys [][]byte
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, append([]byte(nil), k...))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("toa: reading %s: %w", name(m), err)
	}
	return keys, nil
}

// putKeys adds keys to the set m.
func putKeys(m *ebpf.Map, keys [][]byte) error {
	for _, k := range keys {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("toa: carrying a key over into %s: %w", name(m), err)
		}
	}
	return nil
}
