package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
)

// Kernel is what the agent changes on its host, each part behind the small
// interface of the package that owns it. Tests pass the packages' fakes.
type Kernel struct {
	IPVS  ipvs.Interface
	Addrs arp.Addresses
}

// ReadActual reads back the kernel state relevant to d: all IPVS services
// with their destinations and the addresses of d's interface.
func (k Kernel) ReadActual(ctx context.Context, iface string) (Actual, error) {
	a := Actual{Services: map[ipvs.ServiceKey]ActualService{}}
	svcs, err := k.IPVS.Services(ctx)
	if err != nil {
		return Actual{}, err
	}
	for _, s := range svcs {
		dsts, err := k.IPVS.Destinations(ctx, s.ServiceKey)
		if err != nil {
			return Actual{}, err
		}
		a.Services[s.ServiceKey] = ActualService{Service: s, Destinations: dsts}
	}
	if iface != "" {
		if a.Addresses, err = k.Addrs.List(ctx, iface); err != nil {
			return Actual{}, err
		}
	}
	return a, nil
}

// Apply runs ops in order and updates owned to match what now exists. It
// goes on after a failed op (one bad backend must not hold back the others)
// and returns every failure joined.
func (k Kernel) Apply(ctx context.Context, ops []Op, owned *Ownership) error {
	var errs []error
	for _, op := range ops {
		if err := k.apply(ctx, op, owned); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (k Kernel) apply(ctx context.Context, op Op, owned *Ownership) error {
	key := op.Service.ServiceKey
	switch op.Kind {
	case AddService:
		if err := k.IPVS.AddService(ctx, op.Service); err != nil {
			return err
		}
		owned.addService(key)
	case UpdateService:
		owned.addService(key) // adopted: configured, found in the kernel
		return k.IPVS.UpdateService(ctx, op.Service)
	case DeleteService:
		err := k.IPVS.DeleteService(ctx, key)
		if err == nil || errors.Is(err, ipvs.ErrNotFound) {
			owned.Services = slices.DeleteFunc(owned.Services, func(x ipvs.ServiceKey) bool { return x == key })
			return nil
		}
		return err
	case AddDestination:
		return k.IPVS.AddDestination(ctx, key, op.Destination)
	case UpdateDestination:
		return k.IPVS.UpdateDestination(ctx, key, op.Destination)
	case DeleteDestination:
		err := k.IPVS.DeleteDestination(ctx, key, op.Destination.DestinationKey)
		if errors.Is(err, ipvs.ErrNotFound) {
			return nil
		}
		return err
	case AddAddress:
		if err := k.Addrs.Add(ctx, op.Interface, op.Address); err != nil {
			return err
		}
		owned.addAddress(op.Interface, op.Address)
	case DeleteAddress:
		err := k.Addrs.Delete(ctx, op.Interface, op.Address)
		if err != nil && !errors.Is(err, arp.ErrNotFound) {
			return err
		}
		owned.Addresses = slices.DeleteFunc(owned.Addresses, func(x OwnedAddress) bool {
			return x == OwnedAddress{op.Interface, op.Address}
		})
	default:
		return fmt.Errorf("unknown op %v", op.Kind)
	}
	return nil
}

func (o *Ownership) addService(k ipvs.ServiceKey) {
	if !slices.Contains(o.Services, k) {
		o.Services = append(o.Services, k)
		slices.SortFunc(o.Services, ipvs.ServiceKey.Compare)
	}
}

func (o *Ownership) addAddress(dev string, p netip.Prefix) {
	a := OwnedAddress{dev, p}
	if !slices.Contains(o.Addresses, a) {
		o.Addresses = append(o.Addresses, a)
	}
}
