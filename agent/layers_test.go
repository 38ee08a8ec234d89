package agent

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lvsd/lvsd/"

// layers says which of lvsd's packages each package may import (a prefix
// covers a package and those below it). It is the dependency direction of
// docs/architecture.md: cmd → agent/director → agent → agent's leaves →
// the kernel packages, which import no other kernel package and nothing of
// the agent.
var layers = []layer{
	{pkg: "ipvs/...", mayUse: []string{"ipvs/..."}},
	{pkg: "nat/...", mayUse: []string{"nat/..."}},
	{pkg: "arp/...", mayUse: []string{"arp/..."}},
	{pkg: "cluster/...", mayUse: []string{"cluster/..."}},
	{pkg: "agent/policy"}, {pkg: "agent/statefile"}, {pkg: "agent/api"}, {pkg: "agent/sdnotify"}, {pkg: "agent/histogram"}, {pkg: "agent/metrics"},
	{pkg: "agent/maglev"},
	{pkg: "docs"}, // the operator docs, embedded for lvsd.yaml(5)
	{pkg: "agent/program", mayNot3: kernelLibraries},
	{pkg: "agent/health", mayUse: []string{"agent/histogram", "agent/program"}, mayNot3: kernelLibraries},
	{pkg: "agent/hooks", mayUse: []string{"agent/metrics", "agent/program"}, mayNot3: kernelLibraries},
	{pkg: "agent/config", mayUse: []string{"agent/policy", "agent/hooks", "ipvs", "cluster/..."}, mayNot3: kernelLibraries},
	{pkg: "agent", mayUse: []string{"agent/config", "agent/policy", "agent/health", "agent/hooks", "agent/histogram", "agent/metrics", "agent/maglev", "agent/api", "agent/statefile",
		"ipvs", "nat", "arp", "arp/sysctl", "cluster/..."}, mayNot3: kernelLibraries},
	{pkg: "agent/realserver", mayUse: []string{"agent/config", "agent/api", "agent/statefile", "agent/metrics", "arp", "arp/sysctl", "nat"},
		mayNot3: kernelLibraries},
	{pkg: "agent/director", mayUse: []string{"agent", "agent/config", "agent/health", "agent/hooks", "agent/api", "agent/sdnotify", "agent/metrics",
		"arp", "cluster/..."}, mayNot3: kernelLibraries},
	{pkg: "cmd/...", mayUse: []string{"agent/...", "ipvs", "nat", "arp", "arp/sysctl", "cluster/...", "docs"}, mayNot3: append(kernelLibraries, "golang.org/x/sys/unix")},
	{pkg: "e2e/...", mayUse: []string{"e2e/...", "ipvs", "arp", "agent/api", "agent/health", "agent/maglev", "cluster/bgp", "cluster/bfd"}},
}

type layer struct {
	pkg     string   // package path below the module; "x/..." is x and below
	mayUse  []string // lvsd's packages it may import
	mayNot3 []string // third-party imports it must not make (prefixes)
}

// kernelLibraries reach the kernel or the network; only the kernel
// packages use them.
var kernelLibraries = []string{"github.com/google/nftables", "github.com/vishvananda/netlink", "github.com/hashicorp/memberlist",
	"github.com/moby/ipvs", "github.com/mdlayher/", "github.com/ti-mo/", "github.com/osrg/gobgp"}

func covers(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// imports returns every package's imports, by package path below the
// module, from the non-test Go files under root.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			out[pkg] = append(out[pkg], strings.Trim(imp.Path.Value, `"`))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// violations lists the imports in all that the layers forbid.
func violations(all map[string][]string) []string {
	var bad []string
	for pkg, imps := range all {
		i := slices.IndexFunc(layers, func(l layer) bool { return covers(l.pkg, pkg) })
		if i < 0 {
			bad = append(bad, pkg+": not in the layers of layers_test.go")
			continue
		}
		l := layers[i]
		for _, imp := range imps {
			if own, ok := strings.CutPrefix(imp, module); ok {
				if !slices.ContainsFunc(l.mayUse, func(p string) bool { return covers(p, own) }) {
					bad = append(bad, pkg+" imports "+own)
				}
				continue
			}
			if slices.ContainsFunc(l.mayNot3, func(p string) bool { return strings.HasPrefix(imp, p) }) {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestLayers fails when a package imports what its layer may not: a kernel
// package another kernel package or the agent, the agent a library that
// reaches the kernel, cmd/lvsd nftables, netlink or memberlist directly.
func TestLayers(t *testing.T) {
	all := imports(t, "..")
	if len(all) < 20 {
		t.Fatalf("found only %d packages under ..", len(all))
	}
	if bad := violations(all); len(bad) > 0 {
		t.Errorf("imports across the layers (docs/architecture.md):\n  %s", strings.Join(bad, "\n  "))
	}
}

// The rules catch what they are for.
func TestLayersCatch(t *testing.T) {
	got := violations(map[string][]string{
		"ipvs":          {module + "nat"},
		"cluster/x":     {module + "agent"},
		"agent":         {module + "agent/director", "github.com/vishvananda/netlink"},
		"cmd/lvsd":      {"github.com/google/nftables", "github.com/hashicorp/memberlist"},
		"agent/newpkg":  {},
		"agent/config":  {module + "cluster/connsync", "fmt"},
		"cluster/other": {module + "cluster"},
	})
	want := []string{
		"agent imports agent/director", "agent imports github.com/vishvananda/netlink", "agent/newpkg: not in the layers of layers_test.go",
		"cluster/x imports agent", "cmd/lvsd imports github.com/google/nftables", "cmd/lvsd imports github.com/hashicorp/memberlist",
		"ipvs imports nat",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}
