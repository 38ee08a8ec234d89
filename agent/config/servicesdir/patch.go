package servicesdir

import (
	"slices"
	"sort"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
)

// lastAccepted is the set the last Load accepted, kept so that the next
// Load of a few changed files can start from it.
type lastAccepted struct {
	dir string
	set Set
	// starts[i] is where the services of set.Files[i] start in
	// set.Services; starts[len(set.Files)] is len(set.Services).
	starts []int
	// near indexes set's files by their services' names, VIPs and ports.
	near  neighbours
	valid bool
}

// keepAccepted keeps the set a load of dir just returned for patch, if
// it was accepted (err nil).
func (c *Cache) keepAccepted(dir string, set Set, err error) {
	if err != nil {
		c.last.valid = false
		return
	}
	starts := make([]int, 0, len(set.Files)+1)
	n := 0
	for _, f := range set.Files {
		starts = append(starts, n)
		n += len(f.Services)
	}
	c.last = lastAccepted{dir: dir, set: set, starts: append(starts, n), near: newNeighbours(set.Files), valid: true}
}

// file returns the file of the set at path, or nil.
func (l *lastAccepted) file(path string) *File {
	if i, ok := filePosition(l.set.Files, path); ok {
		return l.set.Files[i]
	}
	return nil
}

// filePosition returns where path is, or would be, in files (sorted by
// path), and whether it is there.
func filePosition(files []*File, path string) (int, bool) {
	i := sort.Search(len(files), func(j int) bool { return files[j].Path >= path })
	return i, i < len(files) && files[i].Path == path
}

// fileChange is a changed path: its new reading, or nil when it is gone,
// and the reading the last accepted set has of it, or nil.
type fileChange struct {
	path      string
	file, old *File
}

// patch is Load of the changed paths of dir when the last set accepted was
// dir's: that set with the changed files' services spliced in (the runs
// between them copied whole, found by binary search), and only the
// changed files' services checked against those that share a name or a
// VIP with them (lastAccepted.near). A one-file edit among 10,000 files
// costs the copy of two lists of pointers, not a walk over every service.
// ok is false where patch cannot tell: a path that is no regular
// file, a file with problems; Load then goes the long way, which reports
// them (what patch read stays cached).
func (c *Cache) patch(dir string, changed []string) (set Set, ok bool, err error) {
	dirty := make(map[string]bool, len(changed))
	for _, p := range changed {
		dirty[p] = true
	}
	cands, gone, problems := c.statChanged(dir, dirty)
	if len(problems) > 0 {
		return Set{}, false, nil
	}
	changes := make([]fileChange, 0, len(gone)+len(cands))
	for _, p := range gone {
		changes = append(changes, fileChange{path: p, old: c.last.file(p)})
	}
	for i, f := range c.readings(cands) {
		if len(f.Problems) > 0 {
			return Set{}, false, nil
		}
		old := c.last.file(cands[i].path)
		if old == f {
			continue // the reading the set has: written, but not changed
		}
		changes = append(changes, fileChange{path: cands[i].path, file: f, old: old})
	}
	c.order.dir = "" // paths came or went: scan sorts the cached ones again
	slices.SortFunc(changes, func(a, b fileChange) int { return strings.Compare(a.path, b.path) })

	set, starts, fresh := c.last.splice(changes)
	var errs config.List
	near := func() []int { return c.last.near.near(set, starts, fresh) }
	checkConflicts(set.Services, fresh, true, near, &errs)
	if len(errs) > 0 {
		c.accepted.valid, c.last.valid = false, false
		return Set{}, true, errs
	}
	set.Replaced = []*File{} // known: none
	for _, ch := range changes {
		if ch.old != nil {
			c.last.near.remove(ch.old)
			set.Replaced = append(set.Replaced, ch.old)
		}
		if ch.file != nil {
			ch.file.acceptedIn = c.accepted.gen // in the accepted set, with the others
			c.last.near.add(ch.file)
		}
	}
	c.last.set, c.last.starts = set, starts
	set.Fresh = fresh
	if set.Fresh == nil {
		set.Fresh = []int{} // known: none
	}
	return set, true, nil
}

// splice returns the last set with changes (sorted by path) made, where
// each file's services start in it, and the indexes of the changed files'
// services.
func (l *lastAccepted) splice(changes []fileChange) (set Set, starts, fresh []int) {
	prev := l.set
	added := 0
	for _, ch := range changes {
		if ch.file != nil {
			added += len(ch.file.Services)
		}
	}
	set.Files = make([]*File, 0, len(prev.Files)+len(changes))
	set.Services = make([]*config.Service, 0, len(prev.Services)+added)
	starts = make([]int, 0, len(prev.Files)+len(changes)+1)
	copyRun := func(from, to int) { // prev's files [from, to)
		delta := len(set.Services) - l.starts[from]
		for _, s := range l.starts[from:to] {
			starts = append(starts, s+delta)
		}
		set.Files = append(set.Files, prev.Files[from:to]...)
		set.Services = append(set.Services, prev.Services[l.starts[from]:l.starts[to]]...)
	}
	from := 0
	for _, ch := range changes {
		i, found := filePosition(prev.Files[from:], ch.path)
		i += from
		copyRun(from, i)
		from = i
		if found {
			from = i + 1 // replaced, or gone
		}
		if ch.file != nil {
			starts = append(starts, len(set.Services))
			set.Files = append(set.Files, ch.file)
			for k := range ch.file.Services {
				fresh = append(fresh, len(set.Services)+k)
			}
			set.Services = ch.file.appendServices(set.Services)
		}
	}
	copyRun(from, len(prev.Files))
	return set, append(starts, len(set.Services)), fresh
}
