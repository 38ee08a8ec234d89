package planner

import (
	"encoding/json"
	"net/netip"
	"slices"

	arp "github.com/lvsd/lvsd/arp/spec"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// Ownership is what lvsd created and may therefore change or remove.
// Anything else in the kernel belongs to someone else (an operator's
// ipvsadm, kube-proxy) and is never touched unless the configuration asks for
// exactly that object, in which case lvsd adopts it.
//
// It is written ahead: objects a plan adds are recorded before the kernel
// changes (Intend), deleted ones leave the record once gone (After), so a
// crash at any point leaves nothing lvsd made without a claim on it. Both
// roles keep it, one writer per file: the director's reconciler the
// services (owned.json), its VIP holder the addresses (addresses.json);
// the real server everything it changes on its host (realserver.json),
// where `lvsd cleanup` finds what to undo.
type Ownership struct {
	Services  []ipvs.ServiceKey `json:"services,omitempty"`
	Addresses []OwnedAddress    `json:"addresses,omitempty"`
	// Sysctls lvsd changed, with the values it found (a real server's).
	Sysctls []OwnedSysctl `json:"sysctls,omitempty"`
	// Links are the tunnel devices lvsd brought up, or created.
	Links []OwnedLink `json:"links,omitempty"`
	// FouPorts are the GUE receive ports lvsd opened.
	FouPorts []OwnedFouPort `json:"fou_ports,omitempty"`
	// NAT says lvsd put its nftables tables (a real server's MSS clamp)
	// in place.
	NAT bool `json:"nft,omitempty"`
}

// OwnedAddress is an address lvsd put on an interface.
type OwnedAddress struct {
	Interface string       `json:"interface"`
	Prefix    netip.Prefix `json:"prefix"`
}

// UnmarshalJSON reads an address as it is written, and as a bare prefix
// ("10.0.0.50/32"), which is how releases before this record format kept a
// real server's addresses on lo: such an entry has no Interface, which its
// reader fills in.
func (a *OwnedAddress) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*a = OwnedAddress{}
		return json.Unmarshal(b, &a.Prefix)
	}
	type plain OwnedAddress // without this method
	return json.Unmarshal(b, (*plain)(a))
}

// OwnedSysctl is a sysctl lvsd set to Value, which was Previous before.
type OwnedSysctl struct {
	Key      string `json:"key"`
	Previous string `json:"previous"`
	Value    string `json:"value"`
}

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

// FouPort is the port p records.
func (p OwnedFouPort) FouPort() arp.FouPort { return arp.FouPort{Port: p.Port, IPv6: p.IPv6} }

func ownedFou(p arp.FouPort) OwnedFouPort { return OwnedFouPort{Port: p.Port, IPv6: p.IPv6} }

// Claims are the kinds of object a record takes on when a plan makes them;
// each file of ownership has one writer, which claims its own kinds.
type Claims uint8

const (
	// ClaimServices: the IPVS services a plan adds, or adopts by updating
	// (the reconciler's).
	ClaimServices Claims = 1 << iota
	// ClaimAddresses: the addresses a plan adds (the VIP holder's; a real
	// server's VIPs on lo).
	ClaimAddresses
	// ClaimHost: the sysctls a plan sets with the values found, the tunnel
	// devices it creates or brings up, the GUE ports it opens and lvsd's
	// nftables tables, which a real server's cleanup undoes. The
	// director's sysctls and tables are not recorded.
	ClaimHost
)

// Intend returns o with every object of the kinds claims that ops create,
// for the record written before they run. A sysctl already recorded keeps
// the value lvsd found first, which is what cleanup restores; a tunnel
// device about to be created counts as created until the kernel says it
// only loaded the module that made it (After). Pure.
func (o Ownership) Intend(ops []Op, claims Claims) Ownership {
	e := ownershipEdit{Ownership: o}
	for _, op := range ops {
		switch {
		case claims&ClaimServices != 0 && (op.Kind == AddService || op.Kind == UpdateService):
			// An update adopts a configured service found in the kernel.
			e.addService(op.Service.ServiceKey)
		case claims&ClaimAddresses != 0 && op.Kind == AddAddress:
			e.addAddress(OwnedAddress{op.Interface, op.Address})
		case claims&ClaimHost != 0:
			e.intendHost(op)
		}
	}
	return e.Ownership
}

// NewClaims says, op by op, whether Intend(ops, claims) adds an entry to o
// for it: an entry the record did not hold before. Pure.
func (o Ownership) NewClaims(ops []Op, claims Claims) []bool {
	out := make([]bool, len(ops))
	claimed := o
	for i, op := range ops {
		if claimed.Recorded(op) {
			continue
		}
		next := claimed.Intend(ops[i:i+1], claims)
		out[i] = !next.Equal(claimed)
		claimed = next
	}
	return out
}

// Recorded reports whether the object op makes is in o already: Intend
// adds nothing for it.
func (o Ownership) Recorded(op Op) bool {
	switch op.Kind {
	case AddService, UpdateService:
		return o.Owns(op.Service.ServiceKey)
	case AddAddress:
		return slices.Contains(o.Addresses, OwnedAddress{op.Interface, op.Address})
	case SetSysctl:
		return slices.ContainsFunc(o.Sysctls, func(s OwnedSysctl) bool { return s.Key == op.Key })
	case CreateLink, SetLinkUp:
		return slices.ContainsFunc(o.Links, func(l OwnedLink) bool { return l.Name == op.Link.Name })
	case AddFouPort:
		return slices.Contains(o.FouPorts, ownedFou(op.Fou))
	case ReplaceNAT:
		return o.NAT
	}
	return false
}

// Adopt returns o with the services keys, configured and (now) in the
// kernel: lvsd's from now on. Pure.
func (o Ownership) Adopt(keys []ipvs.ServiceKey) Ownership {
	e := ownershipEdit{Ownership: o}
	for _, k := range keys {
		e.addService(k)
	}
	return e.Ownership
}

// After returns o once ops ran: gone[i] says op i's object is not lvsd's
// now (deleted, found already gone, forgotten, or not made after all), and
// such an object leaves the record. The applier tells gone from the
// adapters' errors. Pure.
func (o Ownership) After(ops []Op, gone []bool) Ownership {
	e := ownershipEdit{Ownership: o}
	for i, op := range ops {
		if !gone[i] {
			continue
		}
		switch op.Kind {
		case AddService, UpdateService, DeleteService:
			e.deleteService(op.Service.ServiceKey)
		case AddAddress, DeleteAddress, ForgetAddress:
			e.deleteAddress(OwnedAddress{op.Interface, op.Address})
		case SetSysctl, RestoreSysctl, ForgetSysctl:
			e.Sysctls = deleted(e.Sysctls, func(s OwnedSysctl) bool { return s.Key == op.Key })
		case CreateLink, SetLinkUp, SetLinkDown, DeleteLink, ForgetLink:
			e.Links = deleted(e.Links, func(l OwnedLink) bool { return l.Name == op.Link.Name })
		case AddFouPort, DeleteFouPort, ForgetFouPort:
			e.FouPorts = deleted(e.FouPorts, func(p OwnedFouPort) bool { return p == ownedFou(op.Fou) })
		case ReplaceNAT, RemoveNAT, ForgetNAT:
			e.NAT = false
		}
	}
	return e.Ownership
}

// Equal reports whether o and p record the same objects.
func (o Ownership) Equal(p Ownership) bool {
	return sameList(o.Services, p.Services) && sameList(o.Addresses, p.Addresses) &&
		slices.Equal(o.Sysctls, p.Sysctls) && slices.Equal(o.Links, p.Links) &&
		slices.Equal(o.FouPorts, p.FouPorts) && o.NAT == p.NAT
}

// sameList is slices.Equal, told at once for two views of the same array
// (an ownershipEdit that changed nothing: 10,000 keys compared every pass).
func sameList[T comparable](a, b []T) bool {
	if len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// Owns reports whether k is in the record.
func (o Ownership) Owns(k ipvs.ServiceKey) bool {
	_, found := slices.BinarySearchFunc(o.Services, k, ipvs.ServiceKey.Compare)
	return found
}

// ownershipEdit changes an Ownership without touching the original: its
// lists are copied at their first change only. Most passes change none,
// and copying 10,000 keys three times a pass was a tenth of the garbage
// of a one-file change.
type ownershipEdit struct {
	Ownership
	servicesCopied, addressesCopied bool
}

// addService keeps Services sorted, so lookups and inserts stay cheap when a
// cold start adds thousands.
func (e *ownershipEdit) addService(k ipvs.ServiceKey) {
	i, found := slices.BinarySearchFunc(e.Services, k, ipvs.ServiceKey.Compare)
	if found {
		return
	}
	e.copyServices()
	e.Services = slices.Insert(e.Services, i, k)
}

func (e *ownershipEdit) deleteService(k ipvs.ServiceKey) {
	i, found := slices.BinarySearchFunc(e.Services, k, ipvs.ServiceKey.Compare)
	if !found {
		return
	}
	e.copyServices()
	e.Services = slices.Delete(e.Services, i, i+1)
}

func (e *ownershipEdit) copyServices() {
	if !e.servicesCopied {
		e.Services, e.servicesCopied = slices.Clone(e.Services), true
	}
}

func (e *ownershipEdit) addAddress(a OwnedAddress) {
	if slices.Contains(e.Addresses, a) {
		return
	}
	e.copyAddresses()
	e.Addresses = append(e.Addresses, a)
}

func (e *ownershipEdit) deleteAddress(a OwnedAddress) {
	if !slices.Contains(e.Addresses, a) {
		return
	}
	e.copyAddresses()
	e.Addresses = slices.DeleteFunc(e.Addresses, func(x OwnedAddress) bool { return x == a })
}

func (e *ownershipEdit) copyAddresses() {
	if !e.addressesCopied {
		e.Addresses, e.addressesCopied = slices.Clone(e.Addresses), true
	}
}

// intendHost records the host object op is about to make (ClaimHost). The
// lists are short (a dozen sysctls), so each change copies its list.
func (e *ownershipEdit) intendHost(op Op) {
	switch op.Kind {
	case SetSysctl:
		i := slices.IndexFunc(e.Sysctls, func(s OwnedSysctl) bool { return s.Key == op.Key })
		if i < 0 {
			e.Sysctls = append(slices.Clip(e.Sysctls), OwnedSysctl{Key: op.Key, Previous: op.Previous, Value: op.Value})
		} else if e.Sysctls[i].Value != op.Value {
			e.Sysctls = slices.Clone(e.Sysctls)
			e.Sysctls[i].Value = op.Value
		}
	case CreateLink, SetLinkUp:
		if !e.Recorded(op) {
			l := OwnedLink{Name: op.Link.Name, Kind: op.Link.Kind, Created: op.Kind == CreateLink}
			e.Links = append(slices.Clip(e.Links), l)
		}
	case AddFouPort:
		if !e.Recorded(op) {
			e.FouPorts = append(slices.Clip(e.FouPorts), ownedFou(op.Fou))
		}
	case ReplaceNAT:
		e.NAT = true
	}
}

// deleted returns list without the entries del matches, as a new list when
// there are any (the original may be shared).
func deleted[T any](list []T, del func(T) bool) []T {
	if !slices.ContainsFunc(list, del) {
		return list
	}
	return slices.DeleteFunc(slices.Clone(list), del)
}
