package cluster

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// RaisePriority lowers the nice value of every thread of this process to
// nice (threads created later inherit it from the thread that creates
// them). A director in a cluster must answer heartbeats in time on a loaded
// host, as keepalived's vrrp_priority does for VRRP. It never lowers a
// priority the service manager set higher (systemd's Nice=).
func RaisePriority(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// The raw getpriority returns 20 - nice.
		if prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && 20-prio <= nice {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setting nice %d: %w", nice, err)
		}
	}
	return nil
}
