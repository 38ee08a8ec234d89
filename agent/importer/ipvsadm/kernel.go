package ipvsadm

import (
	"context"
	"fmt"

	"github.com/lvsd/lvsd/ipvs/spec"
)

// Reader is what Read needs of package ipvs's kernel handle: its read
// API, and nothing that writes.
type Reader interface {
	Services(ctx context.Context) ([]spec.Service, error)
	Destinations(ctx context.Context, svc spec.ServiceKey) ([]spec.Destination, error)
}

// Read reads the IPVS table from r (the running kernel), every service
// and its destinations.
func Read(ctx context.Context, r Reader) (*Table, error) {
	services, err := r.Services(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the kernel's IPVS services: %w", err)
	}
	t := &Table{}
	for _, s := range services {
		dests, err := r.Destinations(ctx, s.ServiceKey)
		if err != nil {
			return nil, fmt.Errorf("reading the real servers of %s: %w", s.ServiceKey, err)
		}
		e := &Entry{Service: s, Destinations: dests}
		if s.Flags&spec.FlagMHFallback != 0 {
			e.SchedFlags = append(e.SchedFlags, "flag-1")
		}
		if s.Flags&spec.FlagMHPort != 0 {
			e.SchedFlags = append(e.SchedFlags, "flag-2")
		}
		t.Entries = append(t.Entries, e)
	}
	return t, nil
}
