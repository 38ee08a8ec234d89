package planner

import (
	"hash/maphash"
	"iter"
	"maps"
)

// CopyOnWriteMap is a map that is cheap to copy. Its entries live in shards;
// Clone shares every shard with the original, and the first write to a
// shard after a clone copies that shard alone, in whichever of the two
// writes. A pass changes a handful of the 10,000 services the agent knows
// while the status goroutine reads the previous pass's copy: cloning a
// plain map of them for every pass was a fifth of a one-file change's
// garbage. The zero value is an empty map. Like a map, it is not safe for
// concurrent writes; copies may be written and read on different
// goroutines.
type CopyOnWriteMap[K comparable, V any] struct {
	shards []map[K]V // cowShards long once written; shared with clones
	owned  []bool    // shards this copy made itself and may write
	n      int
}

// cowShards: 10,000 entries in shards of ~40, so a write after a clone
// copies ~40 entries and a clone copies 256 pointers.
const cowShards = 256

var cowSeed = maphash.MakeSeed()

func (m *CopyOnWriteMap[K, V]) shard(k K) int {
	return int(maphash.Comparable(cowSeed, k) % cowShards)
}

// Get returns the value of k and whether k is in m.
func (m *CopyOnWriteMap[K, V]) Get(k K) (V, bool) {
	if m.shards == nil {
		var zero V
		return zero, false
	}
	v, ok := m.shards[m.shard(k)][k]
	return v, ok
}

// At returns the value of k, the zero value if k is not in m.
func (m *CopyOnWriteMap[K, V]) At(k K) V {
	v, _ := m.Get(k)
	return v
}

// Has reports whether k is in m.
func (m *CopyOnWriteMap[K, V]) Has(k K) bool {
	_, ok := m.Get(k)
	return ok
}

// Set makes v the value of k.
func (m *CopyOnWriteMap[K, V]) Set(k K, v V) {
	s := m.writable(m.shard(k))
	if _, ok := s[k]; !ok {
		m.n++
	}
	s[k] = v
}

// Delete removes k from m.
func (m *CopyOnWriteMap[K, V]) Delete(k K) {
	if m.shards == nil {
		return
	}
	i := m.shard(k)
	if _, ok := m.shards[i][k]; !ok {
		return
	}
	delete(m.writable(i), k)
	m.n--
}

// Len is the number of entries.
func (m *CopyOnWriteMap[K, V]) Len() int { return m.n }

// All yields every entry, in no order. Deleting the entry just yielded is
// safe; other changes meanwhile may or may not show in what it yields (a
// shard copied for a write is walked as it was).
func (m *CopyOnWriteMap[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for _, s := range m.shards {
			for k, v := range s {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Keys yields every key, in no order, as All does (readBack deletes the
// services gone from the kernel while it walks them).
func (m *CopyOnWriteMap[K, V]) Keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}

// Clone returns a copy of m. Both share every shard until they write it:
// m gives up writing its shards in place too.
func (m *CopyOnWriteMap[K, V]) Clone() CopyOnWriteMap[K, V] {
	if m.shards == nil {
		return CopyOnWriteMap[K, V]{}
	}
	clear(m.owned)
	shards := make([]map[K]V, cowShards)
	copy(shards, m.shards)
	return CopyOnWriteMap[K, V]{shards: shards, owned: make([]bool, cowShards), n: m.n}
}

// writable returns shard i, copied first if another copy may read it.
func (m *CopyOnWriteMap[K, V]) writable(i int) map[K]V {
	if m.shards == nil {
		m.shards, m.owned = make([]map[K]V, cowShards), make([]bool, cowShards)
	}
	if !m.owned[i] {
		m.shards[i] = maps.Clone(m.shards[i])
		if m.shards[i] == nil {
			m.shards[i] = map[K]V{}
		}
		m.owned[i] = true
	}
	return m.shards[i]
}
