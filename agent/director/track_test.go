package director

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
)

// The holder hears each change of the upstream check's verdict once.
func TestFollowTrack(t *testing.T) {
	checks := &fakeChecks{states: map[string]health.State{agent.TrackKey: {Healthy: true}}, changed: make(chan struct{}, 1)}
	verdicts := make(chan bool)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { followTrack(ctx, checks, verdicts, slog.New(slog.DiscardHandler)) })
	defer func() { cancel(); wg.Wait() }()
	next := func() bool {
		t.Helper()
		select {
		case v := <-verdicts:
			return v
		case <-time.After(10 * time.Second): // a liveness bound
			t.Fatal("no verdict")
			return false
		}
	}
	checks.set(agent.TrackKey, false)
	if next() {
		t.Fatal("the failing check passed on")
	}
	checks.set(agent.TrackKey, false) // no change: no verdict
	checks.set(agent.TrackKey, true)
	if !next() {
		t.Fatal("the passing check passed on as failing")
	}
}
