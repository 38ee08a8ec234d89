package planner

import (
	"net/netip"
	"slices"

	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// Ownership is what lvsd created and may therefore change or remove.
// Anything else in the kernel belongs to someone else (an operator's
// ipvsadm, kube-proxy) and is never touched unless the configuration asks for
// exactly that object, in which case lvsd adopts it.
//
// It is written ahead: objects a plan adds are recorded before the kernel
// changes (Intend), deleted ones leave the record once gone (After), so a
// crash at any point leaves nothing lvsd made without a claim on it. The
// reconciler keeps the services (owned.json), the VIP holder the addresses
// (addresses.json): one writer per file.
type Ownership struct {
	Services  []ipvs.ServiceKey `json:"services,omitempty"`
	Addresses []OwnedAddress    `json:"addresses,omitempty"`
}

// OwnedAddress is an address lvsd put on an interface.
type OwnedAddress struct {
	Interface string       `json:"interface"`
	Prefix    netip.Prefix `json:"prefix"`
}

// Intend returns o with every object ops create, for the record written
// before they run. Pure.
func (o Ownership) Intend(ops []Op) Ownership {
	e := ownershipEdit{Ownership: o}
	for _, op := range ops {
		switch op.Kind {
		case AddService, UpdateService: // an update adopts a configured service found in the kernel
			e.addService(op.Service.ServiceKey)
		case AddAddress:
			e.addAddress(OwnedAddress{op.Interface, op.Address})
		}
	}
	return e.Ownership
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

// After returns o once ops ran: gone[i] says op i's object is no longer in
// the kernel (deleted, or found already gone), and such an object leaves the
// record. The applier tells gone from the adapters' errors.
func (o Ownership) After(ops []Op, gone []bool) Ownership {
	e := ownershipEdit{Ownership: o}
	for i, op := range ops {
		if !gone[i] {
			continue
		}
		switch op.Kind {
		case DeleteService:
			e.deleteService(op.Service.ServiceKey)
		case DeleteAddress:
			e.deleteAddress(OwnedAddress{op.Interface, op.Address})
		}
	}
	return e.Ownership
}

// Equal reports whether o and p record the same objects.
func (o Ownership) Equal(p Ownership) bool {
	return sameList(o.Services, p.Services) && sameList(o.Addresses, p.Addresses)
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
