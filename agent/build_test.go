package agent

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
)

// Rebuilding from the previous pieces gives what a build from scratch
// gives: services changed, added and removed, NAT rules and VIP addresses
// included.
func TestRebuildIsBuild(t *testing.T) {
	e := newEnv(t)
	services := func(weights map[int]string, skip, extra int) string {
		var b strings.Builder
		for i := range 20 {
			if i == skip {
				continue
			}
			fwd := "dr"
			if i%3 == 0 {
				fwd = "nat"
			}
			fmt.Fprintf(&b, "---\nservice: s%d\nvip: 10.0.%d.1\nports: [%d]\nforwarding: %s\nbackends: [{address: 10.1.0.%d, weight: %s}]\n",
				i, i%4, 1000+i, fwd, i+1, weights[i])
		}
		if extra > 0 {
			fmt.Fprintf(&b, "---\nservice: s%d\nvip: 10.0.9.1\nports: [80]\nforwarding: nat\nbackends: [{address: 10.1.1.1}]\n", extra)
		}
		return b.String()
	}
	weights := map[int]string{}
	for i := range 20 {
		weights[i] = "1"
	}
	e.service("all", services(weights, -1, 0))
	prev, err := LoadConfig(e.dir + "/lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	weights[4] = "7"
	e.service("all", services(weights, 6, 30))
	next, err := LoadConfig(e.dir + "/lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changed := map[string]bool{"s4": true, "s6": true, "s30": true}
	got, _, err := planner.Rebuild(next.Agent, next.Services, prev.pieces, prev.Desired, changed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, next.Desired) {
		t.Errorf("rebuilt:\n%q\nbuilt:\n%q", serviceStrings(got), serviceStrings(next.Desired))
	}
	if got.NAT.Digest() != next.Desired.NAT.Digest() || !reflect.DeepEqual(got.VIPs, next.Desired.VIPs) {
		t.Error("NAT rules or VIP addresses differ")
	}
}

// Whatever a reload changes — weights and backends (the rest of the
// desired state stands), forwarding and VIPs (it does not), services added
// and removed — rebuilding from the previous pieces gives what a build
// from scratch gives.
func TestRebuildIsBuildWhateverChanged(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(5, 6))
	type svc struct {
		vip, fwd, backend, weight int
	}
	body := func(i int, s svc) string {
		b := fmt.Sprintf("service: s%d\nvip: 10.0.%d.1\nports: [%d]\nforwarding: %s\nbackends: [{address: 10.1.0.%d, weight: %d}]\n",
			i, s.vip, 1000+i, []string{"dr", "nat", "fullnat"}[s.fwd], s.backend, s.weight)
		if s.fwd == 2 {
			b += fmt.Sprintf("fullnat: {source_addresses: [10.2.0.%d]}\n", 1+i)
		}
		return b
	}
	live := map[int]svc{}
	for i := range 12 {
		live[i] = svc{vip: i % 3, fwd: i % 3, backend: i + 1, weight: 1}
		e.service(fmt.Sprintf("s%02d", i), body(i, live[i]))
	}
	prev, err := LoadConfig(e.dir + "/lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 200 {
		changed := map[string]bool{}
		for range 1 + rng.IntN(3) {
			i := rng.IntN(16)
			s, ok := live[i]
			switch k := rng.IntN(10); {
			case !ok || k == 0: // added, or changed wholesale
				s = svc{vip: rng.IntN(3), fwd: rng.IntN(3), backend: 1 + rng.IntN(30), weight: 1}
			case k == 1:
				delete(live, i)
				os.Remove(filepath.Join(e.dir, "services.d", fmt.Sprintf("s%02d.yaml", i)))
				changed[fmt.Sprintf("s%d", i)] = true
				continue
			case k == 2:
				s.fwd = rng.IntN(3)
			case k == 3:
				s.vip = rng.IntN(3)
			case k < 7:
				s.weight = 1 + rng.IntN(9)
			default:
				s.backend = 1 + rng.IntN(30)
			}
			live[i] = s
			e.service(fmt.Sprintf("s%02d", i), body(i, s))
			changed[fmt.Sprintf("s%d", i)] = true
		}
		next, err := LoadConfig(e.dir + "/lvsd.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var fresh []int // the changed services (every other round: look at all)
		for i, s := range next.Services {
			if changed[s.Name] && round%2 == 0 {
				fresh = append(fresh, i)
			}
		}
		got, pieces, err := planner.Rebuild(next.Agent, next.Services, prev.pieces, prev.Desired, changed, fresh)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, next.Desired) {
			t.Fatalf("round %d, %v changed: rebuilt\n%q\nbuilt\n%q\nVIPs %v / %v", round, changed,
				serviceStrings(got), serviceStrings(next.Desired), got.VIPs, next.Desired.VIPs)
		}
		// The pieces name what they were made of (Config.named reads it).
		for _, s := range next.Services {
			if src := pieces.Source(s.Name); src == nil || !reflect.DeepEqual(src, s) {
				t.Fatalf("round %d: the piece of %s was not made of its service", round, s.Name)
			}
		}
		prev = next
		prev.Desired, prev.pieces = got, pieces
	}
}
