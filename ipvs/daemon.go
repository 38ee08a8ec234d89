package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
)

// The kernel's connection-sync daemon: a master sends the director's IPVS
// connection entries as multicast UDP (protocol v1, net.ipv4.vs.sync_version)
// and a backup applies what it receives to its own connection table. Each
// network namespace runs at most one master and one backup, each with its own
// configuration. moby/ipvs has no API for them; daemon_linux.go speaks the
// generic netlink commands (IPVS_CMD_NEW/DEL/GET_DAEMON) itself.

// SyncDaemons starts, stops and lists the kernel's sync daemons. Kernel and
// Fake implement it.
type SyncDaemons interface {
	// StartDaemon makes the daemon of d.State run with d's settings: it does
	// nothing if one with the same effective settings runs, and replaces one
	// with other settings (the kernel cannot change a running daemon). With
	// an error the action is DaemonRestarted only if the old daemon was
	// stopped before the new one failed to start.
	StartDaemon(ctx context.Context, d Daemon) (DaemonAction, error)
	// StopDaemon stops the daemon of that state; one that does not run is no error.
	StopDaemon(ctx context.Context, state DaemonState) error
	// Daemons lists the running daemons, master first, with the values the
	// kernel uses (its defaults filled in, MaxLen clamped).
	Daemons(ctx context.Context) ([]Daemon, error)
}

// checkDaemon refuses what the kernel would refuse with a bare EINVAL, so the
// caller learns which field is wrong (and a running daemon is not stopped
// for a replacement that cannot start).
func checkDaemon(d Daemon) error {
	switch {
	case d.State != DaemonMaster && d.State != DaemonBackup:
		return fmt.Errorf("state must be master or backup: %w", syscall.EINVAL)
	case d.Interface == "" || len(d.Interface) > 15:
		// IP_VS_IFNAME_MAXLEN 16 including the NUL, as IFNAMSIZ.
		return fmt.Errorf("interface name %q must have 1 to 15 bytes: %w", d.Interface, syscall.EINVAL)
	case d.Group.IsValid() && !d.Group.Unmap().IsMulticast():
		return fmt.Errorf("group %s is not a multicast address: %w", d.Group, syscall.EINVAL)
	}
	return nil
}

// describe names a daemon operation in errors.
func describe(verb string, d Daemon) string {
	e := d.Effective(0)
	return fmt.Sprintf("%s IPVS %s sync daemon on %q (syncid %d, group %s)", verb, d.State, d.Interface, d.SyncID,
		netip.AddrPortFrom(e.Group, e.Port))
}

// checkStopState refuses to stop a daemon that is neither master nor
// backup, as the kernel would with a bare EINVAL.
func checkStopState(state DaemonState) error {
	if state != DaemonMaster && state != DaemonBackup {
		return fmt.Errorf("stopping IPVS sync daemon: state must be master or backup: %w", syscall.EINVAL)
	}
	return nil
}
