package ipvs

import "context"

// TimeoutConfig reads and sets the namespace's IPVS timeouts. Kernel and
// Fake implement it.
type TimeoutConfig interface {
	// Timeouts reads the timeouts in force.
	Timeouts(ctx context.Context) (Timeouts, error)
	// SetTimeouts sets the non-zero fields of t and leaves the others as
	// they are.
	SetTimeouts(ctx context.Context, t Timeouts) error
}
