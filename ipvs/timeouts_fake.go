package ipvs

import (
	"context"
	"fmt"
)

var _ TimeoutConfig = (*Fake)(nil)

// Timeouts implements TimeoutConfig: the kernel's defaults until set.
func (f *Fake) Timeouts(ctx context.Context) (Timeouts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return DefaultTimeouts.Over(f.timeouts), nil
}

// SetTimeouts implements TimeoutConfig like the kernel: zero fields stay,
// a value it would refuse fails and changes nothing.
func (f *Fake) SetTimeouts(ctx context.Context, t Timeouts) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("setting IPVS timeouts %s: %w", t, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeouts = f.timeouts.Over(t)
	f.ops = append(f.ops, "set-timeouts "+t.String())
	return nil
}
