package views

import (
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
)

func TestCollectCoordination(t *testing.T) {
	now := time.Unix(1012, 0)
	held := &agent.HeldChange{Since: time.Unix(1000, 0), Wait: "30s", Lagging: map[string][]string{"web": {"d2"}, "api": nil}}
	for _, tc := range []struct {
		name string
		c    agent.Coordination
		want map[string]float64
	}{
		{name: "nothing held", c: agent.Coordination{Together: 3, Alone: 1},
			want: map[string]float64{"held_services": 0, "held_seconds": 0, "together": 3, "alone": 1}},
		{name: "two services held 12 s", c: agent.Coordination{Held: held, Together: 3},
			want: map[string]float64{"held_services": 2, "held_seconds": 12, "together": 3, "alone": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]float64{}
			gauge := func(d *prometheus.Desc, v float64, _ ...string) {
				switch d {
				case descHeldServices:
					got["held_services"] = v
				case descHeldSeconds:
					got["held_seconds"] = v
				}
			}
			counter := func(d *prometheus.Desc, v uint64, labels ...string) { got[labels[0]] = float64(v) }
			collectCoordination(tc.c, now, gauge, counter)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
