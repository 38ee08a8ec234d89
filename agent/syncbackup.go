package agent

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// SyncBackup is the kernel as the connection-sync relay checks its writes
// (connsync.Kernel): whether lvsd's backup daemon runs, and the IPVS
// connection table it fills.
type SyncBackup struct {
	Daemons ipvs.SyncDaemons
	Conns   ipvs.ConnectionWalker
	Port    uint16 // the backup daemon's: the conn_sync port + 1
}

var _ connsync.Kernel = SyncBackup{}

// BackupRunning implements connsync.Kernel: lvsd's backup daemon runs on
// the sync interface and port with lvsd's sync ID (or 0, which takes
// every ID).
func (b SyncBackup) BackupRunning(ctx context.Context) (bool, error) {
	ds, err := b.Daemons.Daemons(ctx)
	if err != nil {
		return false, err
	}
	for _, d := range ds {
		if d.State == ipvs.DaemonBackup && d.Interface == planner.SyncInterface && d.Port == b.Port &&
			(d.SyncID == planner.SyncID || d.SyncID == 0) {
			return true, nil
		}
	}
	return false, nil
}

// EachConnection implements connsync.Kernel.
func (b SyncBackup) EachConnection(ctx context.Context, f func(connsync.ConnID)) error {
	return b.Conns.EachConnection(ctx, func(c ipvs.Connection) {
		if c.Protocol != 0 { // a persistence template
			f(connsync.ConnID{Protocol: uint8(c.Protocol), Client: c.Client, Virtual: c.Virtual})
		}
	})
}

// SlowBackupStart delays the first start of a backup daemon by Delay: a
// test knob (LVSD_TEST_BACKUP_DAEMON_DELAY) that makes the kernel's backup
// daemon come up long after the relay has received the others' state, as
// a slow first pass does.
type SlowBackupStart struct {
	ipvs.SyncDaemons
	Delay   time.Duration
	delayed atomic.Bool
}

// StartDaemon implements ipvs.SyncDaemons.
func (s *SlowBackupStart) StartDaemon(ctx context.Context, d ipvs.Daemon) (ipvs.DaemonAction, error) {
	if d.State == ipvs.DaemonBackup && s.delayed.CompareAndSwap(false, true) {
		select {
		case <-time.After(s.Delay):
		case <-ctx.Done():
			return ipvs.DaemonUnchanged, ctx.Err()
		}
	}
	return s.SyncDaemons.StartDaemon(ctx, d)
}
