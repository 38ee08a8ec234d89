package ipvs

import (
	"context"
	"errors"
)

// Interface is what the agent needs from the kernel's IPVS tables.
// Implementations must be safe for concurrent use. Errors name the object.
type Interface interface {
	// Services lists every virtual service in the kernel, lvsd's or not.
	Services(ctx context.Context) ([]Service, error)
	// Service reads one virtual service; an error wrapping ErrNotFound
	// when it is not in the kernel. One request, whatever the table's size.
	Service(ctx context.Context, svc ServiceKey) (Service, error)
	// Destinations lists a service's destinations in the kernel's list order.
	Destinations(ctx context.Context, svc ServiceKey) ([]Destination, error)

	AddService(ctx context.Context, svc Service) error
	UpdateService(ctx context.Context, svc Service) error
	DeleteService(ctx context.Context, svc ServiceKey) error

	AddDestination(ctx context.Context, svc ServiceKey, dst Destination) error
	UpdateDestination(ctx context.Context, svc ServiceKey, dst Destination) error
	DeleteDestination(ctx context.Context, svc ServiceKey, dst DestinationKey) error
}

// ErrNotAvailable is wrapped by errors saying the kernel has no usable IPVS.
var ErrNotAvailable = errors.New("IPVS not available")

// ErrExists and ErrNotFound are wrapped by errors for duplicate adds and for
// objects that do not exist, by both the kernel implementation and the Fake.
var (
	ErrExists   = errors.New("already exists")
	ErrNotFound = errors.New("not found")
)
