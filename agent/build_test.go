package agent

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
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
	got, _, err := Rebuild(next.Agent, next.Services, prev.pieces, prev.Desired, changed)
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
