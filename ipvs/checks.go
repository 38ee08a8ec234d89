package ipvs

import (
	"fmt"
	"syscall"
)

// What the kernel refuses with an errno, checked before a request: the
// error then names the field, and the Fake fails where the kernel would.

// flagHashed is IP_VS_SVC_F_HASHED: the kernel sets it on read and must
// not be sent it back.
const flagHashed Flags = 0x0002

// checkThresholds refuses what the kernel refuses with ERANGE
// (ip_vs_add_dest, ip_vs_edit_dest): a lower threshold above the upper
// one, which includes a lower threshold without an upper one.
func checkThresholds(d Destination) error {
	if d.LowerThreshold > d.UpperThreshold {
		return fmt.Errorf("lower threshold %d above upper threshold %d: %w", d.LowerThreshold, d.UpperThreshold, syscall.ERANGE)
	}
	return nil
}

// checkTunnel refuses what the kernel refuses (ip_vs_add_dest, ip_vs_edit_dest:
// a GUE destination needs a port), so the Fake fails where the kernel would.
func checkTunnel(t TunnelOptions) error {
	if t.Type == TunnelGUE && t.Port == 0 {
		return fmt.Errorf("tunnel gue without a port: %w", syscall.EINVAL)
	}
	return nil
}
