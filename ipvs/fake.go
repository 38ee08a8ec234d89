package ipvs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Fake is an in-memory IPVS table that behaves like the kernel where the
// agent can tell: duplicates and missing objects fail, destinations are kept in
// the kernel's list order (a new one goes to the head), and the kernel's
// HASHED flag is never visible. Ops records every mutating call.
type Fake struct {
	mu       sync.Mutex // guards all following fields
	services []fakeService
	index    map[ServiceKey]int // position in services: tests run it with tens of thousands
	ops      []string
	daemons  fakeDaemons // sync daemons, daemon_fake.go
	timeouts Timeouts    // set so far over DefaultTimeouts, timeouts_fake.go
}

type fakeService struct {
	svc   Service
	dests []Destination // kernel list order
}

var _ Interface = (*Fake)(nil)

// NewFake returns an empty table.
func NewFake() *Fake { return &Fake{index: map[ServiceKey]int{}} }

// Ops returns the mutating calls made so far, one line each, and forgets them.
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

func (f *Fake) find(k ServiceKey) int {
	if i, ok := f.index[k]; ok {
		return i
	}
	return -1
}

// Service implements Interface.
func (f *Fake) Service(ctx context.Context, k ServiceKey) (Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(k)
	if i < 0 {
		return Service{}, fmt.Errorf("getting service %s: %w", k, ErrNotFound)
	}
	return f.services[i].svc, nil
}

// Services implements Interface.
func (f *Fake) Services(ctx context.Context) ([]Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Service, len(f.services))
	for i, s := range f.services {
		out[i] = s.svc
	}
	return out, nil
}

// Destinations implements Interface.
func (f *Fake) Destinations(ctx context.Context, k ServiceKey) ([]Destination, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(k)
	if i < 0 {
		return nil, fmt.Errorf("listing destinations of %s: %w", k, ErrNotFound)
	}
	return slices.Clone(f.services[i].dests), nil
}

// AddService implements Interface.
func (f *Fake) AddService(ctx context.Context, svc Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.find(svc.ServiceKey) >= 0 {
		return fmt.Errorf("adding service %s: %w", svc, ErrExists)
	}
	if svc.Scheduler == "" {
		return fmt.Errorf("adding service %s: empty scheduler: %w", svc, ErrNotFound)
	}
	svc.Flags &^= flagHashed
	if f.index == nil {
		f.index = map[ServiceKey]int{}
	}
	f.index[svc.ServiceKey] = len(f.services)
	f.services = append(f.services, fakeService{svc: svc})
	f.ops = append(f.ops, "add-service "+svc.String())
	return nil
}

// UpdateService implements Interface.
func (f *Fake) UpdateService(ctx context.Context, svc Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(svc.ServiceKey)
	if i < 0 {
		return fmt.Errorf("updating service %s: %w", svc, ErrNotFound)
	}
	f.services[i].svc = svc
	f.ops = append(f.ops, "update-service "+svc.String())
	return nil
}

// DeleteService implements Interface.
func (f *Fake) DeleteService(ctx context.Context, k ServiceKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(k)
	if i < 0 {
		return fmt.Errorf("deleting service %s: %w", k, ErrNotFound)
	}
	f.services = slices.Delete(f.services, i, i+1)
	delete(f.index, k)
	for j := i; j < len(f.services); j++ {
		f.index[f.services[j].svc.ServiceKey] = j
	}
	f.ops = append(f.ops, "delete-service "+k.String())
	return nil
}

// AddDestination implements Interface.
func (f *Fake) AddDestination(ctx context.Context, k ServiceKey, d Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(k)
	if i < 0 {
		return fmt.Errorf("adding destination %s to %s: service %w", d.DestinationKey, k, ErrNotFound)
	}
	if !d.Addr.IsValid() || d.Addr.Is4() == f.services[i].svc.IPv6 && f.services[i].svc.FWMark == 0 {
		return fmt.Errorf("adding destination %s to %s: address family mismatch", d.DestinationKey, k)
	}
	if slices.ContainsFunc(f.services[i].dests, func(x Destination) bool { return x.DestinationKey == d.DestinationKey }) {
		return fmt.Errorf("adding destination %s to %s: %w", d.DestinationKey, k, ErrExists)
	}
	if err := errors.Join(checkTunnel(d.Tunnel), checkThresholds(d)); err != nil {
		return fmt.Errorf("adding destination %s to %s: %w", d.DestinationKey, k, err)
	}
	d.ActiveConns, d.InactiveConns, d.Stats = 0, 0, &Stats{}
	f.services[i].dests = slices.Insert(f.services[i].dests, 0, d)
	f.ops = append(f.ops, fmt.Sprintf("add-destination %s %s weight=%d %s%s", k, d.DestinationKey, d.Weight, d.Method(), opThresholds(d)))
	return nil
}

// UpdateDestination implements Interface.
func (f *Fake) UpdateDestination(ctx context.Context, k ServiceKey, d Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, j, err := f.findDest(k, d.DestinationKey)
	if err != nil {
		return fmt.Errorf("updating destination: %w", err)
	}
	if err := errors.Join(checkTunnel(d.Tunnel), checkThresholds(d)); err != nil {
		return fmt.Errorf("updating destination %s of %s: %w", d.DestinationKey, k, err)
	}
	cur := &f.services[i].dests[j]
	cur.Weight, cur.Forwarding, cur.Tunnel = d.Weight, d.Forwarding, d.Tunnel
	cur.UpperThreshold, cur.LowerThreshold = d.UpperThreshold, d.LowerThreshold
	f.ops = append(f.ops, fmt.Sprintf("update-destination %s %s weight=%d %s%s", k, d.DestinationKey, d.Weight, d.Method(), opThresholds(d)))
	return nil
}

// DeleteDestination implements Interface.
func (f *Fake) DeleteDestination(ctx context.Context, k ServiceKey, dk DestinationKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, j, err := f.findDest(k, dk)
	if err != nil {
		return fmt.Errorf("deleting destination: %w", err)
	}
	f.services[i].dests = slices.Delete(f.services[i].dests, j, j+1)
	f.ops = append(f.ops, fmt.Sprintf("delete-destination %s %s", k, dk))
	return nil
}

// opThresholds is a destination's limits for the op log, when it has any.
func opThresholds(d Destination) string {
	if t := d.Thresholds(); t != "" {
		return " " + t
	}
	return ""
}

// SetConns sets a destination's connection counters, as traffic would.
func (f *Fake) SetConns(k ServiceKey, dk DestinationKey, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, j, err := f.findDest(k, dk)
	if err != nil {
		return err
	}
	f.services[i].dests[j].ActiveConns, f.services[i].dests[j].InactiveConns = uint32(active), uint32(inactive)
	return nil
}

// SetStats sets a destination's traffic counters, as traffic would.
func (f *Fake) SetStats(k ServiceKey, dk DestinationKey, st Stats) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, j, err := f.findDest(k, dk)
	if err != nil {
		return err
	}
	f.services[i].dests[j].Stats = &st
	return nil
}

func (f *Fake) findDest(k ServiceKey, dk DestinationKey) (int, int, error) {
	i := f.find(k)
	if i < 0 {
		return 0, 0, fmt.Errorf("service %s: %w", k, ErrNotFound)
	}
	j := slices.IndexFunc(f.services[i].dests, func(x Destination) bool { return x.DestinationKey == dk })
	if j < 0 {
		return 0, 0, fmt.Errorf("destination %s of %s: %w", dk, k, ErrNotFound)
	}
	return i, j, nil
}
