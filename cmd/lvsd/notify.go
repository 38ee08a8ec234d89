package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/lvsd/lvsd/agent"
)

// liveness is what notifySystemd asks the agent at each tick: ready once it
// can serve, a one-line status for `systemctl status`, and a non-nil err
// when it is wedged (the watchdog is then no longer fed).
type liveness func(now time.Time) (ready bool, status string, err error)

// notifySystemd speaks sd_notify with systemd when lvsd runs as a
// Type=notify unit (NOTIFY_SOCKET set) and returns at once otherwise. It
// sends READY=1 once check says so, so `systemctl start` returns after the
// first reconcile pass, then feeds the watchdog (WatchdogSec=) every third
// of its interval for as long as check reports no error: a reconcile loop
// that hangs stops the pings and systemd restarts lvsd. STOPPING=1 when ctx
// ends.
func notifySystemd(ctx context.Context, log *slog.Logger, check liveness) {
	if ok, err := daemon.SdNotify(false, "STATUS=starting"); !ok {
		if err != nil {
			log.Warn("cannot notify systemd", "err", err)
		}
		return
	}
	watchdog, _ := daemon.SdWatchdogEnabled(false)
	every := 100 * time.Millisecond // until ready
	ready, lastStatus, stalled := false, "", false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			daemon.SdNotify(false, daemon.SdNotifyStopping)
			return
		case now := <-t.C:
			ok, status, err := check(now)
			msg := ""
			if ok && !ready {
				ready = true
				msg = daemon.SdNotifyReady + "\n"
				every = time.Second
				if watchdog > 0 {
					every = min(every, watchdog/3)
				}
			}
			if ready && err == nil && watchdog > 0 {
				msg += daemon.SdNotifyWatchdog + "\n"
			}
			if ready && err != nil && !stalled {
				log.Error("agent wedged: no longer feeding the systemd watchdog", "err", err, "watchdog", watchdog.String())
			}
			stalled = err != nil
			if status != "" && status != lastStatus {
				msg += "STATUS=" + status + "\n"
				lastStatus = status
			}
			if msg != "" {
				daemon.SdNotify(false, msg)
			}
			t.Reset(every)
		}
	}
}

// directorLiveness: ready after the first reconcile pass, wedged when the
// reconcile loop stopped passing (agent.Stalled).
func directorLiveness(a *agent.Agent) liveness {
	return func(now time.Time) (bool, string, error) {
		st, ok := a.Reconciles()
		if !ok {
			return false, "first reconcile pass", nil
		}
		end := st.Last.Add(st.LastDuration)
		if a.Stalled(now) {
			return true, "", fmt.Errorf("no reconcile pass finished since %s", end.Format(time.RFC3339))
		}
		status := fmt.Sprintf("%d IPVS services; last pass at %s ok", st.Services, end.Format(time.TimeOnly))
		if st.LastError != "" {
			status = fmt.Sprintf("%d IPVS services; last pass at %s FAILED (lvsd status; journalctl -u lvsd)",
				st.Services, end.Format(time.TimeOnly))
		}
		return true, status, nil
	}
}

// socketLiveness: ready, and alive, while the local API answers on path.
// The real-server agent serves it before its first pass, whose result the
// weight endpoint reports anyway.
func socketLiveness(path string) liveness {
	return func(time.Time) (bool, string, error) {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return false, "", err
		}
		c.Close()
		return true, "serving on " + path, nil
	}
}
