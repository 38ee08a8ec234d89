package views

import (
	"reflect"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
)

// A reload's answer names the held services and, once, every director
// that lags on any of them.
func TestReloadHeld(t *testing.T) {
	since := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		held *agent.HeldChange
		want *api.ReloadHeld
	}{
		{name: "nothing held"},
		{name: "two services, directors named once",
			held: &agent.HeldChange{Since: since, Until: since.Add(30 * time.Second), Unknown: []string{"old"},
				Lagging: map[string][]string{"web": {"d2", "d3"}, "api": {"d3"}}},
			want: &api.ReloadHeld{Services: []string{"api", "web"}, WaitingFor: []string{"d2", "d3"}, NotWaitedFor: []string{"old"},
				Since: since, Until: since.Add(30 * time.Second)}},
		{name: "not compared yet",
			held: &agent.HeldChange{Since: since, Until: since.Add(time.Second), Lagging: map[string][]string{"web": nil}},
			want: &api.ReloadHeld{Services: []string{"web"}, Since: since, Until: since.Add(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reloadHeld(tc.held); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
