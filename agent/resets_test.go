package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/policy"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// decide runs the policy for a health string: '+' healthy, '-' not, one
// character per backend in configuration order (10.0.0.11, .12, ...).
func decide(t *testing.T, services []*config.Service, states string) map[string]planner.Eligibility {
	t.Helper()
	h := map[string]planner.BackendHealth{}
	for i, c := range states {
		h[planner.HealthKey("web", services[0].Backends[i])] = planner.BackendHealth{Healthy: c == '+', Weight: -1}
	}
	_, decisions := planner.WithHealth(planner.Desired{}, services, h, nil)
	return decisions
}

func TestConnectionResets(t *testing.T) {
	const head = "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {rise: 1, fall: 1, checks: [{type: tcp}]}\n"
	const three = "backends: [{address: 10.0.0.11}, {address: 10.0.0.12}, {address: 10.0.0.13}]\n"
	const pool = "backends: [{address: 10.0.0.11}, {address: 10.0.0.12}, {address: 10.0.0.13}, {address: 10.0.0.21, failover: true}, {address: 10.0.0.22, failover: true}]\n"
	cases := []struct {
		name  string
		yaml  string
		steps []string // health per pass
		want  []string // per transition (step i-1 → i): "" none, "all", or backend positions like "0 2"
	}{
		// DEFAULT_FOR_PROTOCOL, TCP: "连接持续存在于运行状况不佳的后端上"
		{"TCP default: connections persist", head + three, []string{"+++", "-++"}, []string{""}},
		{"always: connections persist", head + "protocol: udp\npersistence_on_unhealthy: always\n" + three, []string{"+++", "-++"}, []string{""}},
		// NEVER_PERSIST: "所有协议：连接始终不持续存在于运行状况不佳的后端上"
		{"never: the unhealthy backend is reset once", head + "persistence_on_unhealthy: never\n" + three,
			[]string{"+++", "-++", "-++", "--+", "+-+"}, []string{"0", "", "1", ""}},
		// DEFAULT_FOR_PROTOCOL, other protocols: never persist.
		{"UDP default: reset", head + "protocol: udp\n" + three, []string{"+++", "+-+"}, []string{"1"}},
		// DEFAULT_FOR_PROTOCOL, per-session, TCP, affinity client-ip: never persist.
		{"TCP per-session client-ip: reset", head + "affinity: client-ip\npersistence: {timeout: 60s}\n" + three,
			[]string{"+++", "++-"}, []string{"2"}},
		{"TCP per-session client-ip-port-proto: persists", head + "affinity: client-ip-port-proto\npersistence: {timeout: 60s}\n" + three,
			[]string{"+++", "++-"}, []string{""}},
		// "...diverted to newly selected healthy backends (unless all backends are unhealthy)":
		// with none healthy all are eligible again, nothing is dropped; the
		// first to recover makes the others ineligible and they are reset.
		{"never: none healthy keeps all, recovery resets the rest", head + "persistence_on_unhealthy: never\n" + three,
			[]string{"+++", "---", "+--"}, []string{"", "1 2"}},
		// "停用了故障切换和故障恢复期间的连接排空 ... 负载均衡器会移除连接跟踪表中的所有条目"
		{"drain_on_failover false: failover and failback reset all", head + "failover: {ratio: 0.5, drain_on_failover: false}\n" + pool,
			[]string{"+++++", "-++++", "--+++", "+++++"}, []string{"", "all", "all"}},
		{"drain_on_failover true: nothing reset", head + "failover: {ratio: 0.5}\n" + pool,
			[]string{"+++++", "--+++", "+++++"}, []string{"", ""}},
		// Through "none eligible" (drop_if_none_healthy) the last pool is remembered.
		{"pool remembered across nothing eligible", head + "failover: {drop_if_none_healthy: true, drain_on_failover: false}\n" + pool,
			[]string{"+++++", "-----", "---++", "-----", "---++"}, []string{"", "all", "", ""}},
		// With drop_if_none_healthy nothing is eligible, but none is healthy
		// either: nothing to divert to, so nothing is dropped until one is.
		{"never with drop_if_none_healthy: reset when one recovers", head + "persistence_on_unhealthy: never\nfailover: {drop_if_none_healthy: true}\n" + three,
			[]string{"+++", "---", "+--"}, []string{"", "1 2"}},
		{"first decision: no reset", head + "persistence_on_unhealthy: never\n" + three, []string{"-++"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			services := loadOne(t, c.yaml).Services
			var applied map[string]planner.Eligibility
			var got []string
			for i, step := range c.steps {
				decided := decide(t, services, step)
				resets, next := planner.ConnectionResets(func(name string) (planner.Eligibility, bool) { e, ok := applied[name]; return e, ok },
					func(name string) (planner.Eligibility, bool) { e, ok := decided[name]; return e, ok }, services)
				applied = next
				if i == 0 {
					if len(resets) != 0 {
						t.Errorf("first decision reset %+v", resets)
					}
					continue
				}
				r, ok := resets["web"]
				switch {
				case !ok:
					got = append(got, "")
				case r.All:
					got = append(got, "all")
				default:
					var s []string // positions of the reset backends
					for i, b := range services[0].Backends {
						if r.Backends[planner.HealthKey("web", b)] {
							s = append(s, string(rune('0'+i)))
						}
					}
					got = append(got, strings.Join(s, " "))
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("health %q: resets %q, want %q", c.steps, got, c.want)
			}
		})
	}
}

// A reset deletes the destination, waits for the kernel to expire its
// connections, and adds it back with its slot weight before lowering it:
// connections of the others are untouched and the Maglev slots stay.
func TestResetThroughTheKernel(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\npersistence_on_unhealthy: never\nhealth: {checks: [{type: tcp}]}\nbackends: [{address: 10.0.0.11, weight: 2}, {address: 10.0.0.12}, {address: 10.0.0.13}]\n")
	a := e.agent()
	states := map[string]health.State{
		"web/10.0.0.11": {Healthy: true, Weight: health.NoWeight},
		"web/10.0.0.12": {Healthy: true, Weight: health.NoWeight},
		"web/10.0.0.13": {Healthy: true, Weight: health.NoWeight},
	}
	a.opts.Health = &fakeHealth{states: states}
	relay := &forgetfulRelay{}
	a.opts.ConnSync = relay
	a.setConfig(a.cfg, Changes{All: true})
	e.reconcile(a)
	if v := e.sysctls.Values(); v["net/ipv4/vs/expire_nodest_conn"] != "1" || v["net/ipv4/vs/expire_quiescent_template"] != "1" {
		t.Errorf("sysctls %q lack connection expiry", v)
	}
	before := e.ipvs.Ops()

	// 10.0.0.11 has connections to drop; 10.0.0.12 becomes unhealthy too,
	// but has none: it is left alone (no reorder for nothing).
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	if err := e.ipvs.SetConns(svc, ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.11"), Port: 80}, 3, 1); err != nil {
		t.Fatal(err)
	}
	states["web/10.0.0.11"] = health.State{Weight: health.NoWeight}
	states["web/10.0.0.12"] = health.State{Weight: health.NoWeight}
	var logged bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logged, nil))
	ops, _ := a.reconcile(t.Context())
	// The log names what is dropped, not what had nothing to drop.
	if want := `event=reset service=web ipvs_service=tcp:10.0.0.50:80 destinations=[10.0.0.11:80] reason="unhealthy, persistence_on_unhealthy never (tcp)"`; strings.Count(logged.String(), "event=reset") != 1 || !strings.Contains(logged.String(), want) {
		t.Errorf("log:\n%s\nwant one reset line with %s", logged.String(), want)
	}
	var kinds []string
	for _, op := range ops {
		kinds = append(kinds, op.String())
	}
	want := []string{
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.11:80 weight 0 route",
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 weight 0 route",
		"delete-destination tcp:10.0.0.50:80 -> 10.0.0.11:80 (reset: unhealthy, persistence_on_unhealthy never (tcp))",
		"await-expiry tcp:10.0.0.50:80 -> [10.0.0.11:80] (unhealthy, persistence_on_unhealthy never (tcp))",
		"add-destination tcp:10.0.0.50:80 -> 10.0.0.11:80 weight 2 route (with its slot weight)",
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.11:80 weight 0 route (not eligible)",
	}
	if !slices.Equal(kinds, want) {
		t.Fatalf("ops:\n got %q\nwant %q", kinds, want)
	}
	if len(e.ipvs.Ops()) != len(before)+len(want)-1 {
		t.Errorf("kernel calls %q", e.ipvs.Ops()[len(before):])
	}
	if e.conns.Calls() == 0 {
		t.Error("the reset did not wait on the connection table")
	}
	if st, _ := a.Reconciles(); st.Resets != 1 {
		t.Errorf("lvsd_connection_resets_total would say %d, want 1", st.Resets)
	}
	if want := []string{"10.0.0.50 [10.0.0.11:80]"}; !slices.Equal(relay.forgot, want) {
		t.Errorf("the relay forgot %q, want %q", relay.forgot, want)
	}
	// Staying unhealthy resets nothing more; a fresh pass is empty.
	if got, _ := a.reconcile(t.Context()); len(got) != 0 {
		t.Errorf("next pass: %v", got)
	}
}

// forgetfulRelay records what the agent asks the connection-sync relay to
// forget, and the services it lets the relay apply records of.
type forgetfulRelay struct {
	forgot   []string
	services []connsync.Service
}

func (r *forgetfulRelay) SetServices(list []connsync.Service) { r.services = list }

func (*forgetfulRelay) Stats() connsync.Stats   { return connsync.Stats{} }
func (r *forgetfulRelay) ReleaseVIP(netip.Addr) {}

func (r *forgetfulRelay) ForgetDestinations(vip netip.Addr, dests []netip.AddrPort) {
	r.forgot = append(r.forgot, fmt.Sprint(vip, " ", dests))
}

// The record of applied decisions is the decisions as the last plan saw
// them, but for a pool an applied decision carried while nothing was
// eligible: that stays until the service is decided anew, and goes with
// the service.
func TestMarkAppliedKeepsCarriedPools(t *testing.T) {
	a := &Agent{}
	decide := func(m map[string]planner.Eligibility) {
		var c planner.CopyOnWriteMap[string, planner.Eligibility]
		for name, e := range m {
			c.Set(name, e)
		}
		a.eligibility = c
	}
	noneEligible := planner.Eligibility{Rule: "none eligible"}
	carried := planner.Eligibility{Rule: "none eligible", Pool: policy.PoolFailover}
	primary := planner.Eligibility{Rule: "primaries", Pool: policy.PoolPrimary}
	failover := planner.Eligibility{Rule: "failover", Pool: policy.PoolFailover}
	steps := []struct {
		name    string
		decided map[string]planner.Eligibility
		names   []string
		applied map[string]planner.Eligibility
		want    map[string]string // rule and pool applied, by service
	}{
		{"first plan, web carries its pool", map[string]planner.Eligibility{"web": noneEligible, "db": primary}, []string{"web", "db"},
			map[string]planner.Eligibility{"web": carried, "db": primary}, map[string]string{"web": "none eligible/failover", "db": "primaries/primary"}},
		{"db decided anew, web kept", map[string]planner.Eligibility{"web": noneEligible, "db": failover}, []string{"db"},
			map[string]planner.Eligibility{"db": failover}, map[string]string{"web": "none eligible/failover", "db": "failover/failover"}},
		{"web removed", map[string]planner.Eligibility{"db": failover}, []string{"web"},
			map[string]planner.Eligibility{}, map[string]string{"db": "failover/failover"}},
	}
	for _, s := range steps {
		decide(s.decided)
		names := map[string]bool{}
		for _, n := range s.names {
			names[n] = true
		}
		a.markApplied(names, s.applied)
		got := map[string]string{}
		for name := range a.applied.Keys() {
			e := a.applied.At(name)
			got[name] = e.Rule + "/" + e.Pool.String()
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s: applied %v, want %v", s.name, got, s.want)
		}
	}
	if len(a.carried) != 0 {
		t.Errorf("still carried after the service went: %v", a.carried)
	}
}
