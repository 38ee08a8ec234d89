package ipvs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The kernel reads an IPv4 netmask as raw mask bytes and an IPv6 one as a
// prefix length; a round trip through the moby types must keep both.
func TestMobyServiceRoundTrip(t *testing.T) {
	cases := []struct {
		svc         Service
		wantNetmask uint32
		wantFamily  uint16
	}{
		{Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh", Flags: FlagMHFallback | FlagMHPort}, 0xFFFFFFFF, syscall.AF_INET},
		{Service{ServiceKey: ServiceKey{Protocol: l4.UDP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 53}, Scheduler: "rr", Flags: FlagPersistent, Timeout: 300, Netmask: 24}, nativeUint32([]byte{255, 255, 255, 0}), syscall.AF_INET},
		{Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("fd00::50"), Port: 443, IPv6: true}, Scheduler: "mh"}, 128, syscall.AF_INET6},
		{Service{ServiceKey: ServiceKey{FWMark: 7, IPv6: true}, Scheduler: "mh", Flags: FlagPersistent, Timeout: 60, Netmask: 64}, 64, syscall.AF_INET6},
	}
	for _, c := range cases {
		m := toMobyService(c.svc)
		if m.Netmask != c.wantNetmask || m.AddressFamily != c.wantFamily {
			t.Errorf("%v: netmask %#x family %d, want %#x %d", c.svc, m.Netmask, m.AddressFamily, c.wantNetmask, c.wantFamily)
		}
		m.Flags |= uint32(flagHashed) // as the kernel returns it
		if got := fromMobyService(m); got != c.svc {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, c.svc)
		}
	}
}

// moby/ipvs is reached through mobyConn only, and mobyConn calls none of
// its destination requests: a write through them would drop a GUE or GRE
// destination's encapsulation, a read through them its counters' upper
// bits.
func TestMobyOnlyHere(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "github.com/moby/ipvs" && name != "moby_linux.go" {
				t.Errorf("%s imports moby/ipvs: reach it through mobyConn (moby_linux.go)", name)
			}
		}
	}
	f, err := parser.ParseFile(fset, "moby_linux.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && strings.Contains(sel.Sel.Name, "Destination") {
			t.Errorf("%s: moby_linux.go uses moby's %s: destinations go through dest_linux.go", fset.Position(sel.Pos()), sel.Sel.Name)
		}
		return true
	})
}
