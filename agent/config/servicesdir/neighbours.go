package servicesdir

import (
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
)

// neighbours indexes the files of the last accepted set by the names,
// VIPs and ports of their services. A service can only conflict with one
// of the same name, or one on the same VIP claiming one of its ports, so a
// patch finds what a changed service must be checked against here instead
// of walking every service of the set: on a VIP with 10,000 services, one
// a port, an edit looks at the one on its port.
type neighbours struct {
	byName map[string][]*File
	byVIP  map[netip.Addr][]*File // every service on the VIP
	// byPort has the services that claim a few ports (each of them); wide
	// those that claim more (all ports, or a long range), by VIP.
	byPort map[vipPort][]*File
	wide   map[netip.Addr][]*File
}

type vipPort struct {
	vip  netip.Addr
	port uint16
}

// fewPorts is the most ports a service may claim and still be indexed by
// each of them.
const fewPorts = 64

func newNeighbours(files []*File) neighbours {
	n := neighbours{byName: map[string][]*File{}, byVIP: map[netip.Addr][]*File{},
		byPort: map[vipPort][]*File{}, wide: map[netip.Addr][]*File{}}
	for _, f := range files {
		n.add(f)
	}
	return n
}

// claimsFew reports whether s claims at most fewPorts ports.
func claimsFew(s *config.Service) bool {
	if s.AllPorts {
		return false
	}
	n := 0
	for _, r := range s.Ports {
		n += int(r.To-r.From) + 1
	}
	return n <= fewPorts
}

// eachPort calls f with every port s claims (s claims few).
func eachPort(s *config.Service, f func(uint16)) {
	for _, r := range s.Ports {
		for p := int(r.From); p <= int(r.To); p++ {
			f(uint16(p))
		}
	}
}

func (n neighbours) add(f *File) {
	for i := range f.Services {
		s := &f.Services[i]
		n.byName[s.Name] = appendOnce(n.byName[s.Name], f)
		n.byVIP[s.VIP] = appendOnce(n.byVIP[s.VIP], f)
		if !claimsFew(s) {
			n.wide[s.VIP] = appendOnce(n.wide[s.VIP], f)
			continue
		}
		eachPort(s, func(p uint16) {
			k := vipPort{s.VIP, p}
			n.byPort[k] = appendOnce(n.byPort[k], f)
		})
	}
}

func (n neighbours) remove(f *File) {
	for i := range f.Services {
		s := &f.Services[i]
		dropFile(n.byName, s.Name, f)
		dropFile(n.byVIP, s.VIP, f)
		if !claimsFew(s) {
			dropFile(n.wide, s.VIP, f)
			continue
		}
		eachPort(s, func(p uint16) { dropFile(n.byPort, vipPort{s.VIP, p}, f) })
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
// of the services of unchanged files that share a name with a service at
// fresh, or its VIP and maybe some of its ports: every service a fresh one
// may conflict with, and some it does not (checkChanged filters them).
// Sorted, each once.
func (n neighbours) near(set Set, starts, fresh []int) []int {
	var out []int
	seen := map[*File]bool{}
	visit := func(files []*File) {
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			i, found := filePosition(set.Files, f.Path)
			if !found || set.Files[i] != f {
				continue // replaced or gone: its new reading is fresh
			}
			for k := range f.Services {
				out = append(out, starts[i]+k)
			}
		}
	}
	for _, i := range fresh {
		s := set.Services[i]
		visit(n.byName[s.Name])
		if !claimsFew(s) {
			visit(n.byVIP[s.VIP])
			continue
		}
		visit(n.wide[s.VIP])
		eachPort(s, func(p uint16) { visit(n.byPort[vipPort{s.VIP, p}]) })
	}
	slices.Sort(out)
	return out
}
