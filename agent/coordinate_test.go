package agent

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster"
)

// fakeAgreement is what the cluster publishes of the peers'
// configurations, set by the test.
type fakeAgreement struct {
	configs cluster.PeerConfigs
	changed chan struct{}
}

func (f *fakeAgreement) PeerConfigs() cluster.PeerConfigs    { return f.configs }
func (f *fakeAgreement) PeerConfigsChanged() <-chan struct{} { return f.changed }

// coordinatedEnv is a director with coordinated changes on, web in force
// and in the kernel.
func coordinatedEnv(t *testing.T) (*testEnv, *Agent, *fakeAgreement, *recordedAdvertiser) {
	e := newEnv(t)
	e.service("web", webTwo)
	agreement, adverts := &fakeAgreement{changed: make(chan struct{})}, &recordedAdvertiser{}
	a := e.agentWith(Options{ConfigAgreement: agreement, ConfigDigest: adverts})
	a.coordinate = config.CoordinatedChanges{Enabled: true, Wait: 30 * time.Second}
	e.reconcile(a)
	e.ipvs.Ops()
	return e, a, agreement, adverts
}

// peersSee makes the cluster publish the peers as comparing with the
// digest last advertised.
func peersSee(f *fakeAgreement, adverts *recordedAdvertiser, peers map[string]cluster.PeerConfig) {
	f.configs = cluster.PeerConfigs{Against: adverts.got[len(adverts.got)-1].Sum, Peers: peers}
}

const webThree = webTwo + "  - {address: 10.0.0.13}\n"

// A backend added to web waits, advertised, until the peer advertises the
// same web; then the kernel gets it. The status names the lagging peer.
func TestCoordinatedChangeWaitsForEveryDirector(t *testing.T) {
	e, a, agreement, adverts := coordinatedEnv(t)
	agreement.configs = cluster.PeerConfigs{Peers: map[string]cluster.PeerConfig{"d2": {Known: true, Same: true}}}
	e.service("web", webThree)
	before := len(adverts.got)
	e.reload(a)
	if len(adverts.got) != before+1 {
		t.Fatalf("the loaded change was advertised %d times, want once", len(adverts.got)-before)
	}
	if got := e.reconcile(a); len(got) != 0 {
		t.Fatalf("the held change reached the kernel: %q", got)
	}
	h := a.Published().Coordination.Held
	if h == nil || !reflect.DeepEqual(h.Lagging, map[string][]string{"web": {"d2"}}) {
		t.Fatalf("held change in the snapshot: %+v, want web waiting for d2 (compared with the old digest)", h)
	}

	peersSee(agreement, adverts, map[string]cluster.PeerConfig{"d2": {Known: true, Compared: true, Differ: map[string]bool{"web": true}}})
	a.decideHeld()
	if got := e.reconcile(a); len(got) != 0 || a.held == nil {
		t.Fatalf("switched while d2 lags: %q", got)
	}
	e.now = e.now.Add(10 * time.Second)
	peersSee(agreement, adverts, map[string]cluster.PeerConfig{"d2": {Known: true, Same: true}})
	a.decideHeld()
	want := []string{"add-destination tcp:10.0.0.50:80 10.0.0.13:80 weight=1 route"}
	if got := e.reconcile(a); !slices.Equal(got, want) {
		t.Fatalf("once every director has it: %q, want %q", got, want)
	}
	if c := a.Published().Coordination; c.Held != nil || c.Together != 1 || c.Alone != 0 {
		t.Fatalf("coordination after the switch: %+v", c)
	}
}

// What ends a wait, or never starts one.
func TestCoordinatedChangeOutcomes(t *testing.T) {
	lagging := map[string]cluster.PeerConfig{"d2": {Known: true, Compared: true, Differ: map[string]bool{"web": true}}}
	for _, tc := range []struct {
		name string
		// step runs after the change to web is loaded and held (or not).
		peers       map[string]cluster.PeerConfig
		step        func(e *testEnv, a *Agent)
		kernel      []string
		alone, held bool
	}{
		{name: "the wait is over: applied alone", peers: lagging, alone: true,
			step:   func(e *testEnv, a *Agent) { e.now = e.now.Add(30 * time.Second) },
			kernel: []string{"add-destination tcp:10.0.0.50:80 10.0.0.13:80 weight=1 route"}},
		{name: "not yet over", peers: lagging, held: true,
			step: func(e *testEnv, a *Agent) { e.now = e.now.Add(29 * time.Second) }},
		{name: "an earlier release is not waited for", peers: map[string]cluster.PeerConfig{"old": {}},
			step:   func(e *testEnv, a *Agent) {},
			kernel: []string{"add-destination tcp:10.0.0.50:80 10.0.0.13:80 weight=1 route"}},
		{name: "undone while held: nothing to apply", peers: lagging,
			step: func(e *testEnv, a *Agent) { e.service("web", webTwo); e.reload(a) }},
		{name: "a second change waits with the first, both go together", peers: lagging, held: true,
			step: func(e *testEnv, a *Agent) {
				e.service("api", "service: api\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.0.21}\n")
				a.reload("file change", []string{filepath.Join(e.dir, "services.d", "api.yaml")})
				if !slices.Equal(a.held.services, []string{"api", "web"}) {
					e.t.Fatalf("held services %v, want api and web", a.held.services)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, a, agreement, adverts := coordinatedEnv(t)
			e.service("web", webThree)
			e.reload(a)
			peersSee(agreement, adverts, tc.peers)
			tc.step(e, a)
			if a.held != nil {
				peersSee(agreement, adverts, tc.peers)
			}
			got := e.reconcile(a) // runs tick: the wait is checked
			if !slices.Equal(got, tc.kernel) {
				t.Fatalf("kernel calls %q, want %q", got, tc.kernel)
			}
			c := a.Published().Coordination
			if (c.Held != nil) != tc.held || (c.Alone == 1) != tc.alone {
				t.Fatalf("coordination %+v, want held %t, alone %t", c, tc.held, tc.alone)
			}
			if !tc.held {
				return
			}
			peersSee(agreement, adverts, map[string]cluster.PeerConfig{"d2": {Known: true, Same: true}})
			a.decideHeld()
			got = e.reconcile(a)
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "10.0.0.13") {
				t.Fatalf("after the peer caught up: %q", got)
			}
		})
	}
}

// Without coordination (off, or no cluster) a change goes in force at once.
func TestUncoordinatedChangeAppliesAtOnce(t *testing.T) {
	e, a, _, _ := coordinatedEnv(t)
	a.coordinate.Enabled = false
	e.service("web", webThree)
	e.reload(a)
	want := []string{"add-destination tcp:10.0.0.50:80 10.0.0.13:80 weight=1 route"}
	if got := e.reconcile(a); !slices.Equal(got, want) || a.held != nil {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A reload whose change is held answers so, with the services, the
// directors it waits for and the deadline, and changes no kernel; once
// the change is in force a reload answers with nothing held.
func TestReloadOutcomeNamesTheHeldChange(t *testing.T) {
	e, a, agreement, adverts := coordinatedEnv(t)
	agreement.configs = cluster.PeerConfigs{Peers: map[string]cluster.PeerConfig{"d2": {Known: true, Same: true}}}
	e.service("web", webThree)
	loadedAt := e.now
	got := a.reloadAndApply(t.Context())
	if got.Rejected || got.Err != nil || got.Changed != 1 || got.Changes != 0 {
		t.Fatalf("held reload: %+v, want 1 service changed and no kernel change", got)
	}
	want := &HeldChange{Since: loadedAt, Wait: "30s", Until: loadedAt.Add(30 * time.Second),
		Lagging: map[string][]string{"web": {"d2"}}}
	if !reflect.DeepEqual(got.Held, want) {
		t.Fatalf("held change in the answer: %+v, want %+v", got.Held, want)
	}

	peersSee(agreement, adverts, map[string]cluster.PeerConfig{"d2": {Known: true, Same: true}})
	a.decideHeld()
	e.reconcile(a)
	if got := a.reloadAndApply(t.Context()); got.Held != nil || got.Changed != 0 {
		t.Fatalf("a reload after the change went in force: %+v, want nothing held", got)
	}
}
