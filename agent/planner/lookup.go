package planner

import (
	"sort"

	"github.com/lvsd/lvsd/agent/config"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// ServicesOf returns the keys of the IPVS services of the named
// configured services in d (sorted by key).
func ServicesOf(d Desired, names map[string]bool) []ipvs.ServiceKey {
	var out []ipvs.ServiceKey
	if len(names) == 0 {
		return nil
	}
	named := config.NamesOf(names)
	for _, vs := range d.Services {
		if named.Has(vs.Name) && !vs.Internal {
			out = append(out, vs.ServiceKey)
		}
	}
	return out
}

// FindService returns the service of d with key k (d.Services is sorted).
func FindService(d Desired, k ipvs.ServiceKey) (*VirtualService, bool) {
	if i, ok := d.serviceIndex(k); ok {
		return d.Services[i], true
	}
	return nil, false
}

// wants reports whether d has an IPVS service with key k.
func (d Desired) Wants(k ipvs.ServiceKey) bool {
	_, ok := d.serviceIndex(k)
	return ok
}

// serviceIndex is the index of k in d.Services, found by binary search on
// the index: slices.BinarySearchFunc hands its function each probed
// VirtualService by value (~200 bytes copied per step).
func (d Desired) serviceIndex(k ipvs.ServiceKey) (int, bool) {
	i := sort.Search(len(d.Services), func(i int) bool { return d.Services[i].ServiceKey.Compare(k) >= 0 })
	return i, i < len(d.Services) && d.Services[i].ServiceKey.Compare(k) == 0
}
