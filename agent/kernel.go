package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// Kernel is what the agent changes on its host, each part behind the small
// interface of the package that owns it. Tests pass the packages' fakes.
type Kernel struct {
	IPVS  ipvs.Interface
	Conns ipvs.ConnectionLister // the connection table, read while resetting destinations
	Addrs arp.Addresses
	NAT   nat.Interface
	// EnableForwarding and EnableIPVSConntrack set sysctls; both only write
	// when the value differs (nat.EnableForwarding, nat.EnableIPVSConntrack).
	EnableForwarding    func(ctx context.Context, v4, v6 bool) error
	EnableIPVSConntrack func(ctx context.Context) error
	DisableRedirects    func(ctx context.Context, iface string) error
	// EnableConnectionExpiry sets expire_nodest_conn and
	// expire_quiescent_template (ipvs.EnableConnectionExpiry).
	EnableConnectionExpiry func(ctx context.Context) error
}

// expiryTimeout bounds how long a reset waits for the kernel to drop the
// connection entries of its deleted destinations (measured: within 0.13 s).
const expiryTimeout = 2 * time.Second

// EnsureSysctls turns on what d needs. lvsd never turns them off again: other
// software on the host may rely on forwarding.
func (k Kernel) EnsureSysctls(ctx context.Context, d Desired) error {
	var errs []error
	if d.ForwardV4 || d.ForwardV6 {
		errs = append(errs, k.EnableForwarding(ctx, d.ForwardV4, d.ForwardV6))
	}
	if d.ForwardV4 {
		errs = append(errs, k.DisableRedirects(ctx, d.Interface))
	}
	if d.IPVSConntrack {
		errs = append(errs, k.EnableIPVSConntrack(ctx))
	}
	if d.ExpireConnections {
		errs = append(errs, k.EnableConnectionExpiry(ctx))
	}
	return errors.Join(errs...)
}

// ReadActual reads back the kernel state: all IPVS services with their
// destinations, the addresses of iface and the digest of lvsd's nft tables.
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
	if a.NATDigest, err = k.NAT.Installed(ctx); err != nil {
		return Actual{}, err
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
	case ReplaceNAT:
		return k.NAT.Apply(ctx, op.NAT)
	case RemoveNAT:
		return k.NAT.Remove(ctx)
	case AwaitExpiry:
		// On a timeout the re-add that follows revives what is left: those
		// connections go on, the others are gone. Worth an error, not a stop.
		wctx, cancel := context.WithTimeout(ctx, expiryTimeout)
		defer cancel()
		if err := ipvs.AwaitExpiry(wctx, k.Conns, op.Expiring); err != nil {
			return fmt.Errorf("resetting connections of %s: %w", key, err)
		}
	default:
		return fmt.Errorf("unknown op %v", op.Kind)
	}
	return nil
}

// addService keeps Services sorted, so lookups and inserts stay cheap when a
// cold start adds thousands.
func (o *Ownership) addService(k ipvs.ServiceKey) {
	i, found := slices.BinarySearchFunc(o.Services, k, ipvs.ServiceKey.Compare)
	if !found {
		o.Services = slices.Insert(o.Services, i, k)
	}
}

func (o *Ownership) addAddress(dev string, p netip.Prefix) {
	a := OwnedAddress{dev, p}
	if !slices.Contains(o.Addresses, a) {
		o.Addresses = append(o.Addresses, a)
	}
}
