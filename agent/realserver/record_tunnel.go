package realserver

import (
	"slices"

	"github.com/lvsd/lvsd/arp"
)

// OwnedLink is a tunnel device lvsd brought up. Created says lvsd also
// made it (cleanup deletes it); otherwise it is the fallback device of a
// kernel module, which stays, down as lvsd found it.
type OwnedLink struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Created bool   `json:"created,omitempty"`
}

// OwnedFouPort is a GUE receive port lvsd opened.
type OwnedFouPort struct {
	Port uint16 `json:"port"`
	IPv6 bool   `json:"ipv6,omitempty"`
}

func (p OwnedFouPort) fou() arp.FouPort { return arp.FouPort{Port: p.Port, IPv6: p.IPv6} }

func ownedFou(p arp.FouPort) OwnedFouPort { return OwnedFouPort{Port: p.Port, IPv6: p.IPv6} }

func (r *Record) link(name string) (OwnedLink, bool) {
	i := slices.IndexFunc(r.Links, func(l OwnedLink) bool { return l.Name == name })
	if i < 0 {
		return OwnedLink{}, false
	}
	return r.Links[i], true
}

// addLink records l unless name is recorded already; it reports whether
// it added the entry.
func (r *Record) addLink(l OwnedLink) bool {
	if _, ok := r.link(l.Name); ok {
		return false
	}
	r.Links = append(r.Links, l)
	return true
}

func (r *Record) dropLink(name string) {
	r.Links = slices.DeleteFunc(r.Links, func(l OwnedLink) bool { return l.Name == name })
}

func (r *Record) addFou(p arp.FouPort) bool {
	if slices.Contains(r.FouPorts, ownedFou(p)) {
		return false
	}
	r.FouPorts = append(r.FouPorts, ownedFou(p))
	return true
}

func (r *Record) dropFou(p arp.FouPort) {
	r.FouPorts = slices.DeleteFunc(r.FouPorts, func(o OwnedFouPort) bool { return o == ownedFou(p) })
}
