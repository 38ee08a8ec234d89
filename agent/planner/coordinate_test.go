package planner

import (
	"reflect"
	"testing"
	"time"
)

func TestCoordinate(t *testing.T) {
	since := time.Unix(1000, 0)
	wait := 30 * time.Second
	has := PeerServices{Name: "d2", Known: true, Same: true}
	lacks := func(name string, services ...string) PeerServices {
		p := PeerServices{Name: name, Known: true, Compared: true, Differ: map[string]bool{}}
		for _, s := range services {
			p.Differ[s] = true
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		services []string
		peers    []PeerServices
		after    time.Duration
		stale    bool
		want     CoordinationVerdict
	}{
		{name: "alone: at once", services: []string{"web"},
			want: CoordinationVerdict{Switch: true, Lagging: map[string][]string{}}},
		{name: "every peer has the same configuration", services: []string{"web"}, peers: []PeerServices{has},
			want: CoordinationVerdict{Switch: true, Lagging: map[string][]string{}}},
		{name: "a peer lags", services: []string{"web"}, peers: []PeerServices{has, lacks("d3", "web")}, after: 5 * time.Second,
			want: CoordinationVerdict{Lagging: map[string][]string{"web": {"d3"}}}},
		{name: "two lag, named in order", services: []string{"api", "web"}, peers: []PeerServices{lacks("d3", "web", "api"), lacks("d2", "web")},
			want: CoordinationVerdict{Lagging: map[string][]string{"web": {"d2", "d3"}, "api": {"d3"}}}},
		{name: "a peer differs in another service only: the change is agreed", services: []string{"web"}, peers: []PeerServices{lacks("d2", "db")},
			want: CoordinationVerdict{Switch: true, Lagging: map[string][]string{}}},
		{name: "a peer not heard in full may yet differ", services: []string{"web"},
			peers: []PeerServices{{Name: "d2", Known: true, Differ: map[string]bool{"db": true}}},
			want:  CoordinationVerdict{Lagging: map[string][]string{"web": {"d2"}}}},
		{name: "the wait is over: applied anyway", services: []string{"web"}, peers: []PeerServices{lacks("d3", "web")}, after: wait,
			want: CoordinationVerdict{Switch: true, TimedOut: true, Lagging: map[string][]string{"web": {"d3"}}}},
		{name: "an earlier release is not waited for", services: []string{"web"}, peers: []PeerServices{{Name: "old"}, has},
			want: CoordinationVerdict{Switch: true, Lagging: map[string][]string{}, Unknown: []string{"old"}}},
		{name: "compared with an earlier digest: nobody has it yet", services: []string{"web"}, peers: []PeerServices{has, {Name: "old"}}, stale: true,
			want: CoordinationVerdict{Lagging: map[string][]string{"web": {"d2"}}, Unknown: []string{"old"}}},
		{name: "stale and alone: waits for the cluster to compare", services: []string{"web"}, stale: true,
			want: CoordinationVerdict{Lagging: map[string][]string{}}},
		{name: "stale and the wait over", services: []string{"web"}, peers: []PeerServices{has}, stale: true, after: time.Minute,
			want: CoordinationVerdict{Switch: true, TimedOut: true, Lagging: map[string][]string{"web": {"d2"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Coordinate(CoordinationInput{Services: tc.services, Peers: tc.peers, Since: since, Now: since.Add(tc.after),
				Wait: wait, Stale: tc.stale})
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLaggingDirectors(t *testing.T) {
	got := LaggingDirectors(map[string][]string{"web": {"d2", "d3"}, "api": {"d3"}, "db": nil})
	if want := []string{"d2", "d3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
