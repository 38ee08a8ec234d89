package ipvs

// A kernel older than the tunnel attributes (GUE: Linux 5.2, GRE: 5.3)
// ignores them and makes an IPIP destination without a word; the first
// destination written with an encapsulation is read back to tell.

import "fmt"

// checkTunnelAttrs reads dst of svc back on c after its write, once per
// Kernel and only for a destination with an encapsulation, and refuses
// with ErrNotAvailable when the kernel did not keep it.
func (k *Kernel) checkTunnelAttrs(c *genlConn, svc ServiceKey, dst Destination) error {
	if dst.Forwarding != Tunnel || dst.Tunnel == (TunnelOptions{}) || k.tunnelAttrsWork.Load() {
		return nil
	}
	got, err := c.destinations(svc)
	if err != nil {
		return fmt.Errorf("reading the destination back: %w", kernelErr(err))
	}
	var kept TunnelOptions
	for _, d := range got {
		if d.DestinationKey == dst.DestinationKey {
			kept = d.Tunnel
		}
	}
	if kept != dst.Tunnel {
		return fmt.Errorf("%w: the kernel made it %s, not %s: IPVS GUE needs Linux 5.2 and GRE 5.3 (IPIP works everywhere)",
			ErrNotAvailable, kept, dst.Tunnel)
	}
	k.tunnelAttrsWork.Store(true)
	return nil
}
