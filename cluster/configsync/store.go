package configsync

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// Store is the records a director keeps, one per file name: the one the
// merge rule (Stamp.Newer) picks among every publication it has seen. Two
// directors that have seen the same publications keep the same records,
// whatever the order they came in, and so have the same digest. One
// goroutine owns it.
type Store struct {
	sources map[string]bool
	records map[string]*Record
	bytes   int // of the records' data
}

// NewStore keeps the records of the directors named in sources (the
// config_sources): a record of anyone else is refused, however well signed.
func NewStore(sources []string) *Store {
	s := &Store{sources: map[string]bool{}, records: map[string]*Record{}}
	for _, n := range sources {
		s.sources[n] = true
	}
	return s
}

// MayPublish reports whether the director named may publish.
func (s *Store) MayPublish(name string) bool { return s.sources[name] }

// Outcome is what Accept did with a record.
type Outcome int

// Outcomes.
const (
	Kept     Outcome = iota // the record replaced what the store had for its name (or it had none)
	Stale                   // the store has the same or a newer one
	Replaced                // Kept, and the record it replaced came from another publisher: a conflict
)

// Accept merges r into the store and returns what it did and the record
// it replaced, if any.
func (s *Store) Accept(r *Record) (Outcome, *Record, error) {
	if !s.sources[r.Publisher] {
		return Stale, nil, fmt.Errorf("%s is not one of config_sources: its publication of %s is refused", r.Publisher, r.Name)
	}
	old := s.records[r.Name]
	if old != nil && !r.Key().Newer(old.Key()) {
		return Stale, nil, nil
	}
	if old == nil && len(s.records) >= MaxFiles {
		return Stale, nil, fmt.Errorf("%d files kept already, the most config sync distributes: %s from %s is refused", MaxFiles, r.Name, r.Publisher)
	}
	grown := s.bytes + len(r.Data)
	if old != nil {
		grown -= len(old.Data)
	}
	if grown > MaxBytes {
		return Stale, nil, fmt.Errorf("%s from %s would make the files kept larger than %d bytes, the most config sync distributes", r.Name, r.Publisher, MaxBytes)
	}
	s.bytes = grown
	s.records[r.Name] = r
	if old != nil && old.Publisher != r.Publisher {
		return Replaced, old, nil
	}
	return Kept, old, nil
}

// Get returns the record kept for name, or nil.
func (s *Store) Get(name string) *Record { return s.records[name] }

// Names returns the names of the records kept, sorted.
func (s *Store) Names() []string { return slices.Sorted(maps.Keys(s.records)) }

// Len is how many records the store keeps, tombstones included.
func (s *Store) Len() int { return len(s.records) }

// Digest sums what the store keeps: the names with their stamps.
func (s *Store) Digest(sender string) Digest {
	h := sha256.New()
	var buf []byte
	for _, name := range s.Names() {
		r := s.records[name]
		buf = appendString(buf[:0], name)
		buf = appendString(buf, r.Publisher)
		buf = binary.BigEndian.AppendUint64(buf, r.Version)
		if r.Deleted {
			buf = append(buf, flagDeleted)
		} else {
			buf = append(buf, 0)
		}
		h.Write(buf)
	}
	d := Digest{Sender: sender, Records: uint32(len(s.records))}
	copy(d.Sum[:], h.Sum(nil))
	return d
}

// Inventory lists what the store keeps.
func (s *Store) Inventory(sender string) Inventory {
	inv := Inventory{Sender: sender, Entries: make([]Entry, 0, len(s.records))}
	for _, name := range s.Names() {
		inv.Entries = append(inv.Entries, Entry{Name: name, Stamp: s.records[name].Key()})
	}
	return inv
}

// Newer returns the records the store keeps that the peer whose
// inventory this is lacks or has older: what to send it.
func (s *Store) Newer(inv Inventory) []*Record {
	theirs := make(map[string]Stamp, len(inv.Entries))
	for _, e := range inv.Entries {
		theirs[e.Name] = e.Stamp
	}
	var out []*Record
	for _, name := range s.Names() {
		r := s.records[name]
		if t, ok := theirs[name]; !ok || r.Key().Newer(t) {
			out = append(out, r)
		}
	}
	return out
}
