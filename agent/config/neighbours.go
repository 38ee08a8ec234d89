package config

import (
	"net/netip"
	"slices"
	"sort"
)

// neighbours indexes the files of the last accepted set by the names and
// VIPs of their services. A service can only conflict with one of the same
// name or on the same VIP, so a patch finds what a changed service must be
// checked against here instead of walking every service of the set.
type neighbours struct {
	byName map[string][]*File
	byVIP  map[netip.Addr][]*File
}

func newNeighbours(files []*File) neighbours {
	n := neighbours{byName: map[string][]*File{}, byVIP: map[netip.Addr][]*File{}}
	for _, f := range files {
		n.add(f)
	}
	return n
}

func (n neighbours) add(f *File) {
	for i := range f.Services {
		s := &f.Services[i]
		n.byName[s.Name] = appendOnce(n.byName[s.Name], f)
		n.byVIP[s.VIP] = appendOnce(n.byVIP[s.VIP], f)
	}
}

func (n neighbours) remove(f *File) {
	for i := range f.Services {
		s := &f.Services[i]
		dropFile(n.byName, s.Name, f)
		dropFile(n.byVIP, s.VIP, f)
	}
}

// appendOnce appends f unless it is there: a file's services are added one
// after the other, so a file already listed is the last one.
func appendOnce(files []*File, f *File) []*File {
	if len(files) > 0 && files[len(files)-1] == f {
		return files
	}
	return append(files, f)
}

func dropFile[K comparable](m map[K][]*File, k K, f *File) {
	files := slices.DeleteFunc(m[k], func(g *File) bool { return g == f })
	if len(files) == 0 {
		delete(m, k)
		return
	}
	m[k] = files
}

// near returns the indexes in set (whose files' services start at starts)
// of the services of unchanged files that share a name or a VIP with a
// service at fresh: every service a fresh one may conflict with, and some
// it does not (checkChanged filters them). Sorted, each once. A VIP that
// thousands of files share makes it as long as a walk over them.
func (n neighbours) near(set Set, starts, fresh []int) []int {
	var out []int
	seen := map[*File]bool{}
	visit := func(files []*File) {
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			i := sort.Search(len(set.Files), func(j int) bool { return set.Files[j].Path >= f.Path })
			if i == len(set.Files) || set.Files[i] != f {
				continue // replaced or gone: its new reading is fresh
			}
			for k := range f.Services {
				out = append(out, starts[i]+k)
			}
		}
	}
	for _, i := range fresh {
		visit(n.byName[set.Services[i].Name])
		visit(n.byVIP[set.Services[i].VIP])
	}
	slices.Sort(out)
	return out
}
