package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/api"
)

// An accepted reload says what it did; a change held for the other
// directors says so, with the services, the directors and the deadline,
// instead of reading as applied.
func TestWriteReloadResult(t *testing.T) {
	now := time.Date(2026, 12, 5, 11, 45, 0, 0, time.UTC)
	held := func(services, waiting, unknown []string) *api.ReloadHeld {
		return &api.ReloadHeld{Services: services, WaitingFor: waiting, NotWaitedFor: unknown,
			Since: now.Add(-2 * time.Second), Until: now.Add(28 * time.Second)}
	}
	many := make([]string, maxHeldShown+2)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for _, tc := range []struct {
		name string
		res  api.ReloadResult
		want string
	}{
		{name: "applied", res: api.ReloadResult{Changed: 2, Changes: 5},
			want: "reloaded: 2 services changed, 5 kernel changes\n"},
		{name: "a key for the next restart", res: api.ReloadResult{Changed: 0, Restart: []string{"cluster.bind", "bgp"}},
			want: "reloaded: 0 services changed, 0 kernel changes\n" +
				"these changed keys take effect after a restart (systemctl restart lvsd): cluster.bind, bgp\n"},
		{name: "held for two directors", res: api.ReloadResult{Changed: 1, Held: held([]string{"web"}, []string{"lb2", "lb3"}, nil)},
			want: "reloaded: 1 services changed, 0 kernel changes\n" +
				"HELD until every live director has loaded the change (cluster.coordinated_changes), not in force yet: web\n" +
				"  waiting for: lb2, lb3\n" +
				"  in force at the latest at 2026-12-05 11:45:28 (in 28s), even if some director still lags; lvsd status shows the wait\n"},
		{name: "held, not compared yet, an earlier release beside",
			res: api.ReloadResult{Changed: 2, Held: held([]string{"api", "web"}, nil, []string{"old"})},
			want: "reloaded: 2 services changed, 0 kernel changes\n" +
				"HELD until every live director has loaded the change (cluster.coordinated_changes), not in force yet: api, web\n" +
				"  waiting for: the other live directors (not compared yet)\n" +
				"  not waited for (no comparable digest, an earlier release): old\n" +
				"  in force at the latest at 2026-12-05 11:45:28 (in 28s), even if some director still lags; lvsd status shows the wait\n"},
		{name: "many held services are cut", res: api.ReloadResult{Changed: len(many), Held: held(many, []string{"lb2"}, nil)},
			want: "reloaded: 22 services changed, 0 kernel changes\n" +
				"HELD until every live director has loaded the change (cluster.coordinated_changes), not in force yet: " +
				"a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t and 2 more\n" +
				"  waiting for: lb2\n" +
				"  in force at the latest at 2026-12-05 11:45:28 (in 28s), even if some director still lags; lvsd status shows the wait\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeReloadResult(&b, tc.res, now)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}
