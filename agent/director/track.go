package director

import (
	"context"
	"log/slog"
	"sync"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
)

// trackUpstream runs the agent file's upstream check (track block, nil:
// none) on wg until ctx ends, and hands its verdicts to the holder: while
// it fails the director gives its VIPs up, as when its interface is down.
func trackUpstream(ctx context.Context, wg *sync.WaitGroup, t *config.Track, holder *agent.Holder, log *slog.Logger) {
	if t == nil {
		return
	}
	checks := health.NewMonitor(log)
	checks.Set([]health.Target{agent.TrackTarget(t)})
	verdicts := make(chan bool, 1)
	holder.TrackUpstream(verdicts)
	wg.Go(func() { _ = checks.Run(ctx) })
	wg.Go(func() { followTrack(ctx, checks, verdicts, log) })
}

// followTrack sends the upstream check's verdict on every change, logging
// why it fails, until ctx ends.
func followTrack(ctx context.Context, checks agent.HealthChecker, verdicts chan<- bool, log *slog.Logger) {
	ok := true // a target starts healthy
	for {
		select {
		case <-ctx.Done():
			return
		case <-checks.Changed():
		}
		st := checks.Snapshot()[agent.TrackKey]
		if st.Healthy == ok {
			continue
		}
		ok = st.Healthy
		if ok {
			log.Info("upstream check passing", "event", "track", "target", agent.TrackKey)
		} else {
			log.Warn("upstream check failing", "event", "track", "target", agent.TrackKey, "reason", st.LastError)
		}
		select {
		case verdicts <- ok:
		case <-ctx.Done():
			return
		}
	}
}
