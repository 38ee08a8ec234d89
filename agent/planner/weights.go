package planner

import (
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// weighted returns desired with the weights of byBackend on the named
// services (every one with all), the others as they were in prev (the
// previous desired state with weights), in one walk.
func Weighted(desired, prev []*VirtualService, named config.Names, all bool, byBackend map[string]Weights) []*VirtualService {
	out := make([]*VirtualService, len(desired))
	j := 0
	for i, vs := range desired {
		if all || named.Has(vs.Name) && !vs.Internal {
			out[i] = withWeights(vs, byBackend)
			continue
		}
		for j < len(prev) && prev[j].ServiceKey.Compare(vs.ServiceKey) < 0 {
			j++
		}
		if j < len(prev) && prev[j].ServiceKey == vs.ServiceKey {
			out[i] = prev[j]
		} else {
			out[i] = vs
		}
	}
	return out
}

// SpliceWeighted returns prev (the desired state with weights, made from
// the pieces before) with the named services' IPVS services taken out and
// added again from pieces (now) with the weights of byBackend.
func SpliceWeighted(prev []*VirtualService, names map[string]bool, before, pieces Pieces, byBackend map[string]Weights) []*VirtualService {
	removed := before.Keys(names)
	var added []*VirtualService
	for name := range names {
		if p := pieces.Get(name); p != nil {
			for _, vs := range p.services {
				added = append(added, withWeights(vs, byBackend))
			}
		}
	}
	slices.SortFunc(removed, ipvs.ServiceKey.Compare)
	slices.SortFunc(added, byServiceKey)
	return mergeServices(prev, removed, added)
}

// withWeights returns vs with the weights of byBackend (by backend key),
// and its sorry server appended while none of its destinations takes new
// connections: vs itself when that changes nothing (a service whose
// weights are all as configured is the configuration's), else a copy.
func withWeights(in *VirtualService, byBackend map[string]Weights) *VirtualService {
	same, eligible := true, false
	var buf [80]byte
	for _, dst := range in.Destinations {
		w, ok := byBackend[string(in.appendBackend(buf[:0], dst))]
		if !ok {
			w = Weights{kernel: int(dst.Weight), slot: int(dst.SlotWeight)}
		}
		same = same && w.kernel == int(dst.Weight) && w.slot == int(dst.SlotWeight)
		eligible = eligible || w.kernel > 0
	}
	sorry := in.Sorry != nil && !eligible
	if same && !sorry {
		return in
	}
	vs := new(*in)
	vs.Destinations = slices.Clone(vs.Destinations)
	for j, dst := range vs.Destinations {
		if w, ok := byBackend[string(vs.appendBackend(buf[:0], dst))]; ok {
			vs.Destinations[j].Weight, vs.Destinations[j].SlotWeight = uint16(w.kernel), uint16(w.slot)
		}
	}
	if sorry {
		// Last, so that a service made while it is needed has the kernel
		// list of one that got it later (the kernel adds at the head).
		vs.Destinations = append(vs.Destinations, *vs.Sorry)
	}
	return vs
}
