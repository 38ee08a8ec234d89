package ipvs

import (
	"context"
	"fmt"
)

var _ TimeoutConfig = (*Kernel)(nil)

// Timeouts implements TimeoutConfig (IPVS_CMD_GET_CONFIG).
func (k *Kernel) Timeouts(ctx context.Context) (Timeouts, error) {
	k.mu.Lock()
	t, err := k.h.timeouts()
	k.mu.Unlock()
	if err != nil {
		return Timeouts{}, fmt.Errorf("reading IPVS timeouts: %w", kernelErr(err))
	}
	return t, nil
}

// SetTimeouts implements TimeoutConfig (IPVS_CMD_SET_CONFIG). All three
// are sent; the kernel leaves a timeout of 0 as it is.
func (k *Kernel) SetTimeouts(ctx context.Context, t Timeouts) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("setting IPVS timeouts %s: %w", t, err)
	}
	return k.do(func(c mobyConn) error { return c.setTimeouts(t) },
		func() string { return "setting IPVS timeouts " + t.String() })
}
