package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lvsd/lvsd/"

// root is the module's directory, seen from this package's.
const root = "../.."

// layers says which of lvsd's packages each package may import (a prefix
// covers a package and those below it; the most specific row holds). It
// is the dependency direction of docs/architecture.md: cmd →
// agent/director → agent/views → agent → agent's leaves → the kernel packages, which
// import no other kernel package and nothing of the agent. A package's
// test files (in-package and external) obey its row too, plus testMayUse.
var layers = []layer{
	// l4 is the protocol numbers and port ranges that IPVS, nftables and
	// the configuration all speak of: a value leaf with no imports, shared
	// by the kernel packages so that none of them imports another.
	{pkg: "ipvs/l4", pure: true, mayNotReach: kernelOrSyscalls}, // the L4 values IPVS balances on, which nat/rules and the configuration name too
	{pkg: "ipvs/...", mayUse: []string{"ipvs/..."}},
	{pkg: "nat/...", mayUse: []string{"nat/...", "ipvs/l4"},
		testMayUse: []string{"ipvs"}}, // the VM test restores conntrack from IPVS's real connection table, which only ipvs reads
	{pkg: "arp/...", mayUse: []string{"arp/..."}},
	{pkg: "cluster/...", mayUse: []string{"cluster/..."}},
	{pkg: "ipvs/spec", mayUse: []string{"ipvs/l4"}, pure: true, mayNotReach: kernelOrSyscalls}, // services and connections name their protocol in l4's numbers
	{pkg: "arp/spec", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "nat/rules", mayUse: []string{"ipvs/l4"}, pure: true, mayNotReach: kernelOrSyscalls, // rules match l4's protocols and port ranges
		testMayUse: []string{"nat/internal/golden"}}, // the golden cases nat's namespace tests apply to the kernel too
	{pkg: "cluster/bgp/route", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "cluster/settings", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "cluster/vrrp", mayNotReach: kernelLibraries},                                                       // VRRPv3 over raw IP protocol 112 (golang.org/x/net): lvsd's side of a pair with keepalived, no other lvsd package
	{pkg: "cluster/identity", mayNotReach: kernelLibraries},                                                   // a director's key file and its peers' public keys, which the configuration reads too
	{pkg: "cluster/connsync/records", mayUse: []string{"ipvs/l4"}, pure: true, mayNotReach: kernelOrSyscalls}, // a service names its protocol in l4's numbers
	{pkg: "agent/policy", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "agent/maglev", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "agent/histogram", pure: true, mayNotReach: kernelOrSyscalls},
	{pkg: "agent/statefile", mayNotReach: kernelLibraries},
	{pkg: "agent/api", mayNotReach: kernelLibraries},
	{pkg: "agent/sdnotify", mayNotReach: kernelLibraries},
	{pkg: "agent/metrics", mayNotReach: kernelLibraries},
	{pkg: "docs", mayNotReach: kernelLibraries}, // the operator docs, embedded for lvsd.yaml(5)
	{pkg: "agent/layering"}, // this test
	{pkg: "agent/program", mayNot3: kernelLibraries, mayNotReach: kernelLibraries},
	{pkg: "agent/health", mayUse: []string{"agent/histogram", "agent/program"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries},
	{pkg: "agent/hooks", mayUse: []string{"agent/metrics", "agent/program"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries},
	{pkg: "agent/config/yamldoc", pure: true, mayNotReach: kernelOrSyscalls}, // a YAML file as strictly decoded documents, every problem at file:line:col; no schema
	{pkg: "agent/config", mayUse: []string{"agent/config/yamldoc", "ipvs/l4", "agent/policy", "agent/hooks", "agent/program", "ipvs/spec", "cluster/settings", "cluster/bgp/route", "cluster/identity"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries},
	{pkg: "agent/config/servicesdir", mayUse: []string{"agent/config", "agent/config/yamldoc", "agent/program", "ipvs/l4"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries},                              // the services directory as one validated set, read again only where it changed
	{pkg: "agent/configsync", mayUse: []string{"agent/config", "agent/config/servicesdir", "agent/statefile", "cluster/configsync", "cluster/identity"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries}, // cluster.config_sync's side of the services directory; the node carries its messages
	// `lvsd import`: another load balancer's configuration as lvsd's files,
	// checked by the configuration package; no kernel (cmd reads the
	// running IPVS table through ipvs and hands it over).
	{pkg: "agent/importer", mayUse: []string{"agent/config"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries},
	{pkg: "agent/importer/keepalived", mayUse: []string{"agent/importer"}, mayNot3: kernelLibraries, mayNotReach: kernelLibraries,
		testMayUse: []string{"agent/config", "agent/config/servicesdir", "agent/planner"}}, // the samples' imports pass lvsd check: load and plan them
	{pkg: "agent/importer/ipvsadm", mayUse: []string{"agent/importer", "ipvs/spec", "ipvs/l4"}, pure: true, mayNotReach: kernelLibraries,
		testMayUse: []string{"agent/config", "agent/planner"}}, // the round trip: the import, planned by lvsd, is the table it came from
	{pkg: "agent/planner", mayUse: []string{"ipvs/l4", "agent/config", "agent/policy", "ipvs/spec", "nat/rules", "arp/spec", "cluster/bgp/route", "cluster/connsync/records"},
		pure: true, mayNotReach: kernelLibraries, // reaches x/sys/unix only through agent/config → agent/hooks → prometheus
		testMayUse: []string{"agent/config/servicesdir"}}, // the tests build from a services directory, as the agent does
	{pkg: "agent/apply", mayUse: []string{"agent/planner", "ipvs/spec"}, pure: true, mayNotReach: kernelLibraries},
	{pkg: "agent", mayUse: []string{"ipvs/l4", "agent/apply", "agent/planner", "agent/config", "agent/config/servicesdir", "agent/policy", "agent/health", "agent/hooks", "agent/histogram", "agent/statefile",
		"ipvs", "nat", "nat/toa", "arp", "arp/sysctl", "cluster/..."}, mayNot3: kernelLibraries},
	{pkg: "agent/views", mayUse: []string{"ipvs/l4", "agent", "agent/planner", "agent/api", "agent/health", "agent/histogram", "agent/maglev", "agent/metrics", "ipvs/spec",
		"cluster", "cluster/bgp", "cluster/connsync"}, // the status carries the cluster's, BGP's and the relay's own status values
		mayNot3:    kernelLibraries,
		testMayUse: []string{"ipvs", "arp", "arp/sysctl", "nat", "nat/toa"}}, // the tests drive an agent on the kernel packages' fakes
	{pkg: "agent/logging", mayNot3: kernelLibraries}, // the journal is a local datagram socket
	{pkg: "agent/clidoc", mayUse: []string{"docs"}, mayNot3: kernelLibraries},
	{pkg: "agent/realserver", mayUse: []string{"agent/apply", "agent/planner", "agent/config", "agent/api", "agent/statefile", "agent/metrics", "agent/sdnotify", "arp", "arp/sysctl", "nat", "nat/toa"},
		mayNot3: kernelLibraries},
	{pkg: "agent/director", mayUse: []string{"agent", "agent/views", "agent/planner", "agent/config", "agent/configsync", "agent/health", "agent/hooks", "agent/api", "agent/sdnotify", "agent/metrics",
		"agent/statefile", "arp", "cluster/..."}, mayNot3: kernelLibraries,
		testMayUse: []string{"ipvs", "nat", "nat/toa", "arp/sysctl"}}, // the tests build the agent's Kernel from the kernel packages' fakes, as cmd/lvsd builds it from the real ones
	{pkg: "cmd/...", mayUse: []string{"agent/...", "ipvs", "nat", "nat/toa", "arp", "arp/sysctl", "cluster/...", "docs"}, mayNot3: append(slices.Clip(kernelLibraries), "golang.org/x/sys/unix")},

	// e2e talks to lvsd through its binary, its API and the kernel; the
	// rows below name each exception and why.
	{pkg: "e2e/...", mayUse: []string{"e2e/..."}},
	{pkg: "e2e", mayUse: []string{"e2e/..."}, testMayUse: []string{
		"ipvs",                                       // reads back what lvsd programmed: IPVS services, destinations, connections
		"ipvs/l4",                                    // names the protocols of the services and connections it reads back
		"arp",                                        // reads back the addresses lvsd put on the directors' interfaces
		"agent/maglev",                               // TestMaglevPrediction compares lvsd's prediction of ip_vs_mh with the kernel's choice
		"agent/views", "cluster", "cluster/connsync", // decode `lvsd status` JSON into the types lvsd encodes it from, and wait out the cluster's default timers
		"cluster/identity", // the identity tests' injector signs as a director would, with a director's key or another
		"cluster/bgp",      // decodes the BGP status lvsd reports (prefix counts, flap reasons) into its own type
		"nat/toa",          // TestFullNATClientAddress attaches the TOA programs itself; the test of lvsd's client_address finds lvsd's pin root
	}},
	{pkg: "e2e/demo", mayUse: []string{"e2e/...", "ipvs"}}, // prints the kernel's IPVS table as lvsd programmed it
	{pkg: "e2e/bench", mayUse: []string{"e2e/...", "agent/api"}, // lvsd-bench fetches profiles through the control socket's client
		testMayUse: []string{"agent"}}, // the files it writes must load as lvsd loads them
	{pkg: "e2e/healthbench", mayUse: []string{"agent/health"}},                        // measures the health-check engine itself, in-process
	{pkg: "e2e/ecmplab", mayUse: []string{"e2e/...", "cluster/bgp", "cluster/bfd"}},   // proves cluster/bgp and cluster/bfd against FRR at engine level
	{pkg: "e2e/ecmpbench", mayUse: []string{"e2e/...", "cluster/bgp", "cluster/bfd"}}, // compares lvsd's embedded speaker with FRR on the directors
}

type layer struct {
	pkg         string   // package path below the module; "x/..." is x and below
	mayUse      []string // lvsd's packages it may import
	mayNot3     []string // third-party imports it must not make (prefixes)
	mayNotReach []string // third-party packages no chain of its imports may lead to (prefixes); its tests' included
	pure        bool     // computes values from values: none of pureBanned's imports, no clockFuncs (test files aside)
	testMayUse  []string // lvsd's packages its test files may import besides mayUse; each with its reason
}

// kernelLibraries reach the kernel or the network; only the kernel
// packages and those that compose them (agent, agent/director,
// agent/realserver, cmd, e2e) reach them.
var kernelLibraries = []string{"github.com/google/nftables", "github.com/vishvananda/netlink", "github.com/hashicorp/memberlist",
	"github.com/moby/ipvs", "github.com/mdlayher/", "github.com/ti-mo/", "github.com/osrg/gobgp", "github.com/cilium/ebpf"}

// kernelOrSyscalls adds the raw system calls, which the pure leaves reach
// neither; the packages that serve HTTP reach them through the Prometheus
// client.
var kernelOrSyscalls = append(slices.Clip(kernelLibraries), "golang.org/x/sys/")

// pureBanned are the standard library's doors to the world. A pure package
// computes values from values: it reads no file, opens no socket, starts no
// process and logs nothing (its caller logs what it returns).
var pureBanned = []string{"os/...", "net", "net/http/...", "syscall", "golang.org/x/sys/...", "io/fs", "io/ioutil", "log/..."}

// clockFuncs read the clock or wait; a pure package is handed the time.
var clockFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}

// planned are packages whose rows are written before the packages exist;
// every other row must match a package.
var planned = []string{}

// knownViolations are violations the layering is being rid of: TestLayers
// and TestLayersReach print them and fail on any other, and on one of these
// that no longer happens (take it off the list then).
var knownViolations = []string{}

// testFiles names a package's test files (in-package and external) in the
// maps of imports.
const testFiles = " (tests)"

func covers(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func coveredBy(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return covers(p, pkg) })
}

func hasPrefix(prefixes []string, path string) (string, bool) {
	i := slices.IndexFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) })
	if i < 0 {
		return "", false
	}
	return prefixes[i], true
}

// rowOf returns the most specific row covering pkg: x before x/..., and a
// longer prefix before a shorter one.
func rowOf(pkg string) (layer, bool) {
	best, score := -1, -1
	for i, l := range layers {
		if !covers(l.pkg, pkg) {
			continue
		}
		base, prefix := strings.CutSuffix(l.pkg, "/...")
		s := 2 * len(base)
		if !prefix {
			s++
		}
		if s > score {
			best, score = i, s
		}
	}
	if best < 0 {
		return layer{}, false
	}
	return layers[best], true
}

// source is what the module's Go files say, build tags aside: each
// package's imports (its test files' under pkg+testFiles), and where the
// non-test files of pure packages call clockFuncs.
type source struct {
	imports map[string][]string
	clock   []string
}

func readSource(t *testing.T, root string) source {
	t.Helper()
	src := source{imports: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		pkg, key := filepath.ToSlash(filepath.Dir(rel)), filepath.ToSlash(filepath.Dir(rel))
		test := strings.HasSuffix(path, "_test.go")
		if test {
			key += testFiles
		}
		l, _ := rowOf(pkg)
		mode := parser.ImportsOnly
		if l.pure && !test {
			mode = parser.SkipObjectResolution
		}
		f, err := parser.ParseFile(fset, path, nil, mode)
		if err != nil {
			return err
		}
		imps := src.imports[key]
		for _, imp := range f.Imports {
			imps = append(imps, strings.Trim(imp.Path.Value, `"`))
		}
		src.imports[key] = imps
		if l.pure && !test {
			src.clock = append(src.clock, clockUses(fset, f, rel)...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// clockUses lists where f, named name, refers to one of clockFuncs.
func clockUses(fset *token.FileSet, f *ast.File, name string) []string {
	local := ""
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) != "time" {
			continue
		}
		local = "time"
		if imp.Name != nil {
			local = imp.Name.Name
		}
	}
	if local == "" || local == "_" {
		return nil
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == local && slices.Contains(clockFuncs, sel.Sel.Name) {
			bad = append(bad, fmt.Sprintf("%s:%d: time.%s in a pure package", name, fset.Position(sel.Pos()).Line, sel.Sel.Name))
		}
		return true
	})
	return bad
}

// violations lists the imports in all that the layers forbid. all maps a
// package, or its test files (pkg+testFiles), to their imports.
func violations(all map[string][]string) []string {
	var bad []string
	for key, imps := range all {
		pkg, test := strings.CutSuffix(key, testFiles)
		l, ok := rowOf(pkg)
		if !ok {
			bad = append(bad, pkg+": not in the layers of layers_test.go")
			continue
		}
		mayUse := l.mayUse
		if test {
			mayUse = slices.Concat(l.mayUse, l.testMayUse)
		}
		for _, imp := range imps {
			if own, ok := strings.CutPrefix(imp, module); ok {
				if own != pkg && !coveredBy(mayUse, own) {
					bad = append(bad, key+" imports "+own)
				}
				continue
			}
			if _, ok := hasPrefix(l.mayNot3, imp); ok {
				bad = append(bad, key+" imports "+imp)
			}
			if l.pure && !test && coveredBy(pureBanned, imp) {
				bad = append(bad, key+" imports "+imp+", and it is pure")
			}
		}
	}
	slices.Sort(bad)
	return slices.Compact(bad)
}

// rowsAmiss lists the rows that match none of pkgs (unless planned) and
// the rows written twice.
func rowsAmiss(pkgs []string) []string {
	var bad []string
	seen := map[string]bool{}
	for _, l := range layers {
		if seen[l.pkg] {
			bad = append(bad, "row "+l.pkg+" is written twice")
		}
		seen[l.pkg] = true
		if !slices.ContainsFunc(pkgs, func(p string) bool { return covers(l.pkg, p) }) && !slices.Contains(planned, l.pkg) {
			bad = append(bad, "row "+l.pkg+" matches no package")
		}
	}
	return bad
}

// reachViolations lists, for every package whose row has mayNotReach, each
// library on it that a chain of imports leads to, with the shortest chain
// (its test files' chains included). g maps an import path, or a package's
// test files (path+testFiles), to its imports.
func reachViolations(g map[string][]string) []string {
	var bad []string
	found := map[string]bool{}
	for _, start := range slices.Sorted(maps.Keys(g)) {
		full, _ := strings.CutSuffix(start, testFiles)
		pkg, ok := strings.CutPrefix(full, module)
		if !ok {
			continue
		}
		l, ok := rowOf(pkg)
		if !ok || len(l.mayNotReach) == 0 {
			continue
		}
		from := map[string]string{start: ""}
		for queue := []string{start}; len(queue) > 0; queue = queue[1:] {
			for _, imp := range g[queue[0]] {
				if _, ok := from[imp]; ok {
					continue
				}
				from[imp] = queue[0]
				queue = append(queue, imp)
				lib, ok := hasPrefix(l.mayNotReach, imp)
				what := pkg + " reaches " + strings.TrimSuffix(lib, "/")
				if !ok || found[what] {
					continue
				}
				found[what] = true
				var chain []string
				for p := imp; p != ""; p = from[p] {
					chain = append(chain, strings.TrimPrefix(p, module))
				}
				slices.Reverse(chain)
				bad = append(bad, what+": "+strings.Join(chain, " → "))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// report fails t on each of bad that knownViolations does not name, and on
// each known violation of this kind (those containing kind) that is gone.
func report(t *testing.T, kind string, bad []string) {
	t.Helper()
	var fresh []string
	seen := map[string]bool{}
	for _, b := range bad {
		what, _, _ := strings.Cut(b, ": ")
		if slices.Contains(knownViolations, what) {
			seen[what] = true
			t.Logf("known, being removed: %s", b)
			continue
		}
		fresh = append(fresh, b)
	}
	if len(fresh) > 0 {
		t.Errorf("across the layers (docs/architecture.md):\n  %s", strings.Join(fresh, "\n  "))
	}
	for _, k := range knownViolations {
		if strings.Contains(k, kind) && !seen[k] {
			t.Errorf("%q no longer happens: take it off knownViolations", k)
		}
	}
}

// TestLayers fails when a package, or its test files, imports what its
// layer may not: a kernel package another kernel package or the agent, the
// agent a library that reaches the kernel, cmd/lvsd nftables, netlink or
// memberlist directly, a pure package the file system, the network, a
// process or a log, or the clock.
func TestLayers(t *testing.T) {
	src := readSource(t, root)
	if len(src.imports) < 40 {
		t.Fatalf("found only %d packages and tests under %s", len(src.imports), root)
	}
	report(t, " imports ", append(violations(src.imports), src.clock...))
	var pkgs []string
	for key := range src.imports {
		pkgs = append(pkgs, strings.TrimSuffix(key, testFiles))
	}
	if bad := rowsAmiss(pkgs); len(bad) > 0 {
		t.Errorf("the layers table is amiss:\n  %s", strings.Join(bad, "\n  "))
	}
	for _, p := range planned {
		if slices.Contains(pkgs, p) {
			t.Logf("planned package %s exists: take it off planned", p)
		}
	}
}

// TestLayersReach fails when a package reaches a library its row forbids
// through any chain of imports, its tests' included, as the go tool
// resolves them on this system with the e2e and vmtest tags.
func TestLayersReach(t *testing.T) {
	report(t, " reaches ", reachViolations(importGraph(t, root)))
}

// importGraph returns the import graph of the module's packages and their
// tests, and of all they depend on, from `go list -deps -test`.
func importGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs the go tool on PATH to check the layers: %v", err)
		}
		t.Skipf("no go tool to list the import graph: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-tags", "e2e,vmtest", "-deps", "-test", "-json=ImportPath,ForTest,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	g := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, ForTest string
			Imports             []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		node := graphNode(p.ImportPath, p.ForTest)
		if node == "" {
			continue
		}
		for _, imp := range p.Imports {
			imp, _, _ = strings.Cut(imp, " [")
			g[node] = append(g[node], imp)
		}
	}
	for node, imps := range g {
		slices.Sort(imps)
		g[node] = slices.Compact(imps)
	}
	if len(g) < 100 {
		t.Fatalf("go list listed only %d packages", len(g))
	}
	return g
}

// graphNode names a package as listed by go list -test in the import graph:
// a package compiled for its own test, and its external test package, as
// the package's test files; any other package compiled for a test as the
// package itself; the generated test mains not at all.
func graphNode(importPath, forTest string) string {
	path, variant, _ := strings.Cut(importPath, " [")
	switch {
	case forTest != "" && (path == forTest || path == forTest+"_test"):
		return forTest + testFiles
	case variant == "" && strings.HasSuffix(path, ".test"):
		return ""
	}
	return path
}

// The rules catch what they are for.
func TestLayersCatch(t *testing.T) {
	got := violations(map[string][]string{
		"ipvs":                   {module + "nat"},
		"cluster/x":              {module + "agent"},
		"agent":                  {module + "agent/director", "github.com/vishvananda/netlink"},
		"cmd/lvsd":               {"github.com/google/nftables", "github.com/hashicorp/memberlist"},
		"agent/newpkg":           {},
		"agent/config":           {module + "cluster/connsync", "fmt"},
		"cluster/other":          {module + "cluster"},
		"agent/maglev":           {"net/netip", "os", "log/slog", "net"},
		"agent/maglev (tests)":   {"os", module + "agent/maglev"},
		"ipvs (tests)":           {module + "ipvs", module + "nat"},
		"nat (tests)":            {module + "ipvs"},
		"agent/director":         {module + "nat"},
		"agent/director (tests)": {module + "nat", module + "ipvs"},
		"e2e (tests)":            {module + "agent/views", module + "agent/director"},
		"e2e/topo":               {module + "ipvs"},
	})
	want := []string{
		"agent imports agent/director", "agent imports github.com/vishvananda/netlink",
		"agent/config imports cluster/connsync", "agent/director imports nat",
		"agent/maglev imports log/slog, and it is pure", "agent/maglev imports net, and it is pure", "agent/maglev imports os, and it is pure",
		"agent/newpkg: not in the layers of layers_test.go",
		"cluster/x imports agent", "cmd/lvsd imports github.com/google/nftables", "cmd/lvsd imports github.com/hashicorp/memberlist",
		"e2e (tests) imports agent/director", "e2e/topo imports ipvs",
		"ipvs (tests) imports nat", "ipvs imports nat",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}

	got = reachViolations(map[string][]string{
		module + "agent/config":               {"fmt", module + "agent/policy", module + "cluster"},
		module + "agent/config" + testFiles:   {module + "cluster/bgp"},
		module + "cluster":                    {"github.com/hashicorp/memberlist", module + "cluster/bgp"},
		module + "cluster/bgp":                {"github.com/osrg/gobgp/v3/pkg/server"},
		"github.com/osrg/gobgp/v3/pkg/server": {"github.com/osrg/gobgp/v3/api", "golang.org/x/sys/unix"},
		module + "agent/policy" + testFiles:   {module + "agent/hooks"},
		module + "agent/hooks":                {"golang.org/x/sys/unix"},
		module + "agent":                      {module + "cluster"},
	})
	want = []string{
		"agent/config reaches github.com/hashicorp/memberlist: agent/config → cluster → github.com/hashicorp/memberlist",
		"agent/config reaches github.com/osrg/gobgp: agent/config → cluster → cluster/bgp → github.com/osrg/gobgp/v3/pkg/server",
		"agent/policy reaches golang.org/x/sys: agent/policy (tests) → agent/hooks → golang.org/x/sys/unix",
	}
	if !slices.Equal(got, want) {
		t.Errorf("reach violations:\n got %q\nwant %q", got, want)
	}

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "agent/maglev/table.go", `package maglev

import clock "time"

var started = clock.Now()

func wait(d clock.Duration) { clock.Sleep(d) }
`, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got = clockUses(fset, f, "agent/maglev/table.go")
	want = []string{"agent/maglev/table.go:5: time.Now in a pure package", "agent/maglev/table.go:7: time.Sleep in a pure package"}
	if !slices.Equal(got, want) {
		t.Errorf("clock uses:\n got %q\nwant %q", got, want)
	}
}
