package ipvs

import (
	"context"
	"fmt"

	mobyipvs "github.com/moby/ipvs"
)

var _ TimeoutConfig = (*Kernel)(nil)

// Timeouts implements TimeoutConfig (IPVS_CMD_GET_CONFIG).
func (k *Kernel) Timeouts(ctx context.Context) (Timeouts, error) {
	k.mu.Lock()
	c, err := k.h.GetConfig()
	k.mu.Unlock()
	if err != nil {
		return Timeouts{}, fmt.Errorf("reading IPVS timeouts: %w", kernelErr(err))
	}
	return Timeouts{TCP: c.TimeoutTCP, TCPFin: c.TimeoutTCPFin, UDP: c.TimeoutUDP}, nil
}

// SetTimeouts implements TimeoutConfig (IPVS_CMD_SET_CONFIG). moby/ipvs
// sends all three attributes; the kernel leaves a timeout of 0 as it is.
func (k *Kernel) SetTimeouts(ctx context.Context, t Timeouts) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("setting IPVS timeouts %s: %w", t, err)
	}
	return k.do(func(h *mobyipvs.Handle) error {
		return h.SetConfig(&mobyipvs.Config{TimeoutTCP: t.TCP, TimeoutTCPFin: t.TCPFin, TimeoutUDP: t.UDP})
	}, func() string { return "setting IPVS timeouts " + t.String() })
}
