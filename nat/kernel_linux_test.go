package nat

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// These tests need root and nftables; they program a fresh network
// namespace each, never the host's.

// TestKernelListsWhatStringPrints applies every golden case and checks
// that nft lists exactly Ruleset.String(), and that the text is valid nft
// input that recreates the same tables.
func TestKernelListsWhatStringPrints(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	for _, tc := range goldenCases {
		t.Run(tc.Name, func(t *testing.T) {
			rs, err := Render(tc.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Apply(ctx, rs); err != nil {
				t.Fatal(err)
			}
			if got := ns.lvsdTables(t); got != rs.String() {
				t.Fatalf("nft list differs from Ruleset.String():\n--- nft\n%s--- String\n%s", got, rs)
			}
			if d, err := k.Installed(ctx); err != nil || d != rs.Digest() {
				t.Fatalf("Installed() = %q, %v; want %q", d, err, rs.Digest())
			}
			// Round trip through the nft CLI in a second namespace.
			other := newTestNS(t)
			other.nftStdin(t, rs.String())
			if got := other.lvsdTables(t); got != rs.String() {
				t.Fatalf("nft -f of String() lists differently:\n--- nft\n%s--- String\n%s", got, rs)
			}
		})
	}
}

// foreign is state that belongs to someone else and must survive lvsd.
const foreign = `table inet other {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 22 accept
	}
}
table ip lvsd2 {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
	}
}
`

var handleRE = regexp.MustCompile(`# handle \d+`)

func TestKernelReplaceSkipRemove(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	ns.nftStdin(t, foreign)
	foreignBefore := ns.nft(t, "list", "ruleset")
	k := NewKernel(InNetNS(ns.fd))

	if d, err := k.Installed(ctx); err != nil || d != "" {
		t.Fatalf("Installed() on a fresh netns = %q, %v", d, err)
	}
	if err := k.Remove(ctx); err != nil {
		t.Fatalf("Remove without tables: %v", err)
	}

	rs1 := mustRender(t, Spec{Marks: steering})
	rs2 := mustRender(t, goldenSpec(t, "combined"))
	if err := k.Apply(ctx, rs1); err != nil {
		t.Fatalf("Apply to missing tables: %v", err)
	}
	if got := ns.lvsdTables(t); got != rs1.String() {
		t.Fatalf("after Apply(rs1):\n%s", got)
	}
	if err := k.Apply(ctx, rs2); err != nil {
		t.Fatalf("Apply over existing tables: %v", err)
	}
	if got := ns.lvsdTables(t); got != rs2.String() {
		t.Fatalf("after Apply(rs2):\n%s", got)
	}

	// Unchanged: no write. A rewrite would create new tables with new handles.
	handles := handleRE.FindAllString(ns.nft(t, "-a", "list", "table", "ip", TableName), -1)
	if err := k.Apply(ctx, rs2); err != nil {
		t.Fatal(err)
	}
	if again := handleRE.FindAllString(ns.nft(t, "-a", "list", "table", "ip", TableName), -1); strings.Join(again, ",") != strings.Join(handles, ",") {
		t.Errorf("Apply of the installed ruleset rewrote the tables: handles %v -> %v", handles, again)
	}

	// Someone deletes one table: Installed notices, Apply restores it.
	ns.nft(t, "delete", "table", "ip6", TableName)
	if d, _ := k.Installed(ctx); d != "" {
		t.Errorf("Installed() with the ip6 table gone = %q", d)
	}
	if err := k.Apply(ctx, rs2); err != nil {
		t.Fatal(err)
	}
	if got := ns.lvsdTables(t); got != rs2.String() {
		t.Fatalf("after restoring:\n%s", got)
	}

	// Everything lvsd did left the foreign tables alone.
	all := ns.nft(t, "list", "ruleset")
	for _, name := range []string{"table inet other", "table ip lvsd2"} {
		if !strings.Contains(all, name) {
			t.Errorf("%s is gone", name)
		}
	}

	if err := k.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ns.nft(t, "list", "ruleset"); got != foreignBefore {
		t.Errorf("after Remove the ruleset is not the foreign one:\n--- got\n%s--- want\n%s", got, foreignBefore)
	}
	if d, err := k.Installed(ctx); err != nil || d != "" {
		t.Errorf("Installed() after Remove = %q, %v", d, err)
	}
	if err := k.Remove(ctx); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestKernelFailedBatchChangesNothing breaks the ip6 half of a ruleset (a
// jump to a chain that does not exist): the kernel rejects the batch, and
// the ip table, replaced earlier in the same batch, keeps its old content.
func TestKernelFailedBatchChangesNothing(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	old := mustRender(t, Spec{Marks: steering})
	if err := k.Apply(ctx, old); err != nil {
		t.Fatal(err)
	}
	bad := mustRender(t, goldenSpec(t, "single-mark"))
	// Render makes no such ruleset, so the test breaks one through the
	// content Tables shares; its digest, now stale, still differs from
	// the installed one, so Apply writes.
	bad.Tables()[rules.IPv6].Pre = []rules.Rule{{Verdict: rules.JumpFullNAT}}
	if err := k.Apply(ctx, bad); err == nil {
		t.Fatal("Apply of a ruleset with a dangling jump succeeded")
	} else {
		t.Logf("rejected as expected: %v", err)
	}
	if got := ns.lvsdTables(t); got != old.String() {
		t.Errorf("a failed Apply changed the tables:\n%s", got)
	}
	if d, _ := k.Installed(ctx); d != old.Digest() {
		t.Errorf("Installed() = %q after a failed Apply, want %q", d, old.Digest())
	}
}

func TestKernelRejectsZeroRuleset(t *testing.T) {
	requireNetAdmin(t)
	ns := newTestNS(t)
	if err := NewKernel(InNetNS(ns.fd)).Apply(context.Background(), Ruleset{}); err == nil {
		t.Error("Apply(Ruleset{}) succeeded")
	}
}

func mustRender(t testing.TB, s Spec) Ruleset {
	t.Helper()
	rs, err := Render(s)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func goldenSpec(t *testing.T, name string) Spec {
	t.Helper()
	for _, tc := range goldenCases {
		if tc.Name == name {
			return tc.Spec
		}
	}
	t.Fatalf("no golden case %q", name)
	return Spec{}
}

// TestKernelAppliesTenThousandFullNATServices: the batch of 10,000 FULLNAT
// services is larger than a netlink socket's default buffers (208 KiB),
// which refused it with EMSGSIZE before the buffers were raised for the
// batch, and its map elements overflow one netlink attribute (64 KiB)
// unless they are split over several messages.
func TestKernelAppliesTenThousandFullNATServices(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	vip := netip.MustParseAddr("10.0.0.45")
	var spec Spec
	for i := range 10000 {
		spec.SNAT = append(spec.SNAT, rules.SNATRule{
			Match:  rules.Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{port(uint16(10000 + i))}},
			CtMark: uint32(0x10 + i), To: []netip.Addr{netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")},
			Comment: fmt.Sprintf("x%05d", i),
		})
	}
	rs := mustRender(t, spec)
	if err := k.Apply(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if d, err := k.Installed(ctx); err != nil || d != rs.Digest() {
		t.Fatalf("Installed() = %q, %v; want %q", d, err, rs.Digest())
	}
	listed := ns.lvsdTables(t)
	if n := strings.Count(listed, "10.0.0.45 . tcp . "); n != 10000 {
		t.Errorf("%d elements of %s listed, want 10000", n, rules.MapFullNATPorts)
	}
	if n := strings.Count(listed, ": goto snat_0"); n != 10000 {
		t.Errorf("%d elements of %s listed, want 10000", n, rules.MapSNAT)
	}
}
