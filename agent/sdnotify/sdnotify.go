// Package sdnotify tells the service manager (systemd, Type=notify) when
// the agent is ready and that it is alive, from a liveness check the role
// provides. The sd_notify call itself is injected: cmd/lvsd passes
// go-systemd's, tests a recorder.
package sdnotify

import (
	"context"
	"log/slog"
	"net"
	"time"
)

// Liveness is asked at each tick: ready once the agent can serve, a
// one-line status for `systemctl status`, and a non-nil err when it is
// wedged (the watchdog is then no longer fed).
type Liveness func(now time.Time) (ready bool, status string, err error)

// Notifier speaks sd_notify. Notify sends state ("READY=1\nSTATUS=…") and
// reports false without error when no service manager listens
// (NOTIFY_SOCKET unset); Watchdog is the unit's WatchdogSec (0: none).
type Notifier interface {
	Notify(state string) (bool, error)
	Watchdog() time.Duration
}

// The sd_notify states lvsd sends.
const (
	ready    = "READY=1"
	watchdog = "WATCHDOG=1"
	stopping = "STOPPING=1"
)

// Run notifies n until ctx ends, and returns at once when no service manager
// listens. It sends READY=1 once check says so, so `systemctl start`
// returns after the first reconcile pass, then feeds the watchdog every
// third of its interval for as long as check reports no error: a reconcile
// loop that hangs stops the pings and systemd restarts lvsd. STOPPING=1 when
// ctx ends.
func Run(ctx context.Context, log *slog.Logger, n Notifier, check Liveness) {
	if ok, err := n.Notify("STATUS=starting"); !ok {
		if err != nil {
			log.Warn("cannot notify systemd", "err", err)
		}
		return
	}
	dog := n.Watchdog()
	every := 100 * time.Millisecond // until ready
	isReady, lastStatus, stalled := false, "", false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			n.Notify(stopping)
			return
		case now := <-t.C:
			ok, status, err := check(now)
			msg := ""
			if ok && !isReady {
				isReady = true
				msg = ready + "\n"
				every = time.Second
				if dog > 0 {
					every = min(every, dog/3)
				}
			}
			if isReady && err == nil && dog > 0 {
				msg += watchdog + "\n"
			}
			if isReady && err != nil && !stalled {
				log.Error("agent wedged: no longer feeding the systemd watchdog", "err", err, "watchdog", dog.String())
			}
			stalled = err != nil
			if status != "" && status != lastStatus {
				msg += "STATUS=" + status + "\n"
				lastStatus = status
			}
			if msg != "" {
				n.Notify(msg)
			}
			t.Reset(every)
		}
	}
}

// SocketLiveness is ready, and alive, while a unix socket answers at path
// (the real-server agent serves its API before its first pass, whose
// result the weight endpoint reports anyway).
func SocketLiveness(path string) Liveness {
	return func(time.Time) (bool, string, error) {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return false, "", err
		}
		c.Close()
		return true, "serving on " + path, nil
	}
}
