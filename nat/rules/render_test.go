package rules_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/nat/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestRenderGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.Name, func(t *testing.T) {
			rs, err := rules.Render(tc.Spec)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.Name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(rs.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got := rs.String(); got != string(want) {
				t.Errorf("Render(%s) differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", tc.Name, path, got, want)
			}
		})
	}
}

func TestRenderIsIndependentOfRuleOrder(t *testing.T) {
	for _, tc := range goldenCases {
		want, err := rules.Render(tc.Spec)
		if err != nil {
			t.Fatal(err)
		}
		rev := rules.Spec{Marks: slices.Clone(tc.Spec.Marks), SNAT: slices.Clone(tc.Spec.SNAT), SyncPorts: slices.Clone(tc.Spec.SyncPorts),
			SyncGroup: tc.Spec.SyncGroup, DropRedirects6: tc.Spec.DropRedirects6, ClampMSS: slices.Clone(tc.Spec.ClampMSS)}
		slices.Reverse(rev.Marks)
		slices.Reverse(rev.ClampMSS)
		slices.Reverse(rev.SNAT)
		slices.Reverse(rev.SyncPorts)
		if c := tc.Spec.ClusterPort; c != nil {
			rc := *c
			rc.Allow = slices.Clone(c.Allow)
			slices.Reverse(rc.Allow)
			rev.ClusterPort = &rc
		}
		for i := range rev.Marks {
			rev.Marks[i].Sources = slices.Clone(rev.Marks[i].Sources)
			slices.Reverse(rev.Marks[i].Sources)
		}
		got, err := rules.Render(rev)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || got.Digest() != want.Digest() {
			t.Errorf("%s: reversed rule order renders differently:\n%s\nvs\n%s", tc.Name, got, want)
		}
	}
}

func TestDigestTracksContent(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range goldenCases {
		rs, err := rules.Render(tc.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Digest()) != rules.DigestHexChars {
			t.Errorf("%s: digest %q", tc.Name, rs.Digest())
		}
		if other, dup := seen[rs.Digest()]; dup {
			t.Errorf("%s and %s share digest %s", tc.Name, other, rs.Digest())
		}
		seen[rs.Digest()] = tc.Name
		if !strings.Contains(rs.String(), rs.Digest()) {
			t.Errorf("%s: digest not in the text", tc.Name)
		}
	}
}

func TestEmptyRulesetKeepsBothTables(t *testing.T) {
	rs, err := rules.Render(rules.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if !rs.Empty() {
		t.Error("Render(Spec{}).Empty() = false")
	}
	s := rs.String()
	for _, want := range []string{"table ip lvsd {", "table ip6 lvsd {", "set vips"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "chain") {
		t.Errorf("empty ruleset has chains (a nat chain alone makes the kernel track connections):\n%s", s)
	}
}

func TestMarkOnlyRulesetHasNoNATOrConntrack(t *testing.T) {
	rs, err := rules.Render(rules.Spec{Marks: steering})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"ct ", "snat", "postrouting", "fullnat"} {
		if strings.Contains(rs.String(), bad) {
			t.Errorf("mark-only ruleset mentions %q (conntrack would be enabled for DR traffic):\n%s", bad, rs)
		}
	}
}
