package agent

import (
	"context"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
)

// What the views read does not wait for the VIP holder's goroutine, which
// may be in a long takeover (reading the connection table for FULLNAT):
// the snapshot, the kernel's services and addresses, the holder's state.
func TestViewsDoNotWaitForHolder(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	ctx, cancel := context.WithCancel(context.Background())
	wait := a.holder.Start(ctx)
	defer wait()
	defer cancel()
	busy, release := make(chan struct{}), make(chan struct{})
	go a.holder.do(ctx, func(context.Context) ([]planner.Op, error) {
		close(busy)
		<-release
		return nil, nil
	})
	<-busy
	defer close(release)
	// A guard against a hang, not a timing: waiting would never end.
	guard, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	s := a.Published()
	if s == nil || len(s.Desired.Services) != 1 {
		t.Fatalf("snapshot while the holder is busy: %+v", s)
	}
	if actual, err := a.ReadServices(guard, []ipvs.ServiceKey{s.Desired.Services[0].ServiceKey}); err != nil || actual.Services.Len() != 1 {
		t.Fatalf("kernel's services while the holder is busy: %v", err)
	}
	if _, err := a.Addresses(guard, s.Desired.Interface); err != nil {
		t.Fatalf("addresses while the holder is busy: %v", err)
	}
	if st := a.Parts().Holder.State(); st.Drained {
		t.Fatalf("holder's state: %+v", st)
	}
}

// TestStalled: the watchdog's view of the loop.
func TestStalled(t *testing.T) {
	e := newEnv(t)
	a := e.agent()
	if a.Stalled(e.now.Add(time.Hour)) {
		t.Error("stalled before the first pass; a slow start is not a hang")
	}
	e.reconcile(a)
	if a.Stalled(e.now.Add(DefaultResync)) {
		t.Error("stalled one resync period after a pass")
	}
	if !a.Stalled(e.now.Add(2*DefaultResync + DefaultCheck + time.Second)) {
		t.Error("not stalled after two resync periods without a pass")
	}
}
