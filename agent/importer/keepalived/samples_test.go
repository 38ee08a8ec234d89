package keepalived

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/servicesdir"
	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/agent/planner"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// samplesDir holds the configurations the keepalived package ships. They
// are GPL-2.0, so they are read from the installed package rather than
// copied into this repository; CI installs keepalived for the VM tests.
const samplesDir = "/usr/share/doc/keepalived/samples"

func samples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(samplesDir, "keepalived.conf.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no keepalived samples in %s: install the keepalived package (apt-get install keepalived), which ships them", samplesDir)
	}
	return files
}

// TestSamples converts every sample keepalived ships: the files must pass
// `lvsd check` (agent.LoadConfig, as the command runs it), every keyword
// of the sample must be in the report with its line, and the output must
// match the golden file.
func TestSamples(t *testing.T) {
	for _, path := range samples(t) {
		name := strings.TrimPrefix(filepath.Base(path), "keepalived.conf.")
		t.Run(name, func(t *testing.T) {
			nodes, err := ParseFile(path, Options{FS: os.DirFS("/")})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			res := Convert(nodes, ConvertOptions{KeyFile: "cluster.key", Node: "director1"})
			checkLoads(t, res)
			checkEveryKeyword(t, path, nodes, res)
			var out bytes.Buffer
			if err := res.WriteFiles(&out); err != nil {
				t.Fatal(err)
			}
			out.WriteString("# ==> report <==\n")
			if err := res.WriteReport(&out); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", name+".golden"), out.Bytes())
		})
	}
}

// TestSamplesVRRP converts every sample with --cluster vrrp: the files
// must pass `lvsd check` and every keyword must be in the report.
func TestSamplesVRRP(t *testing.T) {
	for _, path := range samples(t) {
		t.Run(strings.TrimPrefix(filepath.Base(path), "keepalived.conf."), func(t *testing.T) {
			nodes, err := ParseFile(path, Options{FS: os.DirFS("/")})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			res := Convert(nodes, ConvertOptions{Cluster: ClusterVRRP, Node: "director1"})
			checkLoads(t, res)
			checkEveryKeyword(t, path, nodes, res)
		})
	}
}

// checkLoads writes the result into a folder with a cluster key and loads
// it as `lvsd check` does.
func checkLoads(t *testing.T, res *importer.Result) {
	t.Helper()
	if err := res.CheckServices(); err != nil {
		t.Fatalf("service files do not pass lvsd check:\n%v", err)
	}
	dir := t.TempDir()
	if err := res.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := lvsdCheck(filepath.Join(dir, "lvsd.yaml")); err != nil {
		var all strings.Builder
		for _, f := range res.Files {
			all.WriteString("# " + f.Path + "\n" + f.Content)
		}
		t.Fatalf("lvsd check refuses the import:\n%v\n%s", err, all.String())
	}
}

// lvsdCheck loads the agent file at path and its services directory and
// plans the director's state, as `lvsd check` does.
func lvsdCheck(path string) error {
	a, err := config.LoadAgent(path)
	if err != nil {
		return err
	}
	services, err := servicesdir.Load(a)
	if err != nil {
		return err
	}
	_, err = planner.Build(a, services)
	return err
}

// checkEveryKeyword: each statement of the file is in the report at its
// line.
func checkEveryKeyword(t *testing.T, path string, nodes []*Node, res *importer.Result) {
	t.Helper()
	reported := map[string]bool{}
	for _, e := range res.Report {
		reported[e.Keyword+"@"+e.File+":"+strconv.Itoa(e.Line)] = true
	}
	var walk func([]*Node)
	walk = func(ns []*Node) {
		for _, n := range ns {
			if !reported[n.Keyword+"@"+n.Where()] {
				t.Errorf("%s: %s is not in the report", n.Where(), n.Keyword)
			}
			walk(n.Children)
		}
	}
	walk(nodes)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestFull converts configurations written for these tests: testdata/full
// with every keyword the importer knows, once with keepalived's
// schedulers, once with --scheduler mh and once with --cluster vrrp; and
// testdata/pair, a director of a keepalived pair with an IPv4 and an IPv6
// instance, as lvsd's own cluster and in mode vrrp.
func TestFull(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		opt       ConvertOptions
	}{
		{"full", "full", ConvertOptions{}},
		{"full-mh", "full", ConvertOptions{Scheduler: "mh"}},
		{"full-vrrp", "full", ConvertOptions{Cluster: ClusterVRRP}},
		{"pair", "pair", ConvertOptions{}},
		{"pair-vrrp", "pair", ConvertOptions{Cluster: ClusterVRRP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			abs, err := filepath.Abs(filepath.Join("testdata", tc.dir, "keepalived.conf"))
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := ParseFile(abs, Options{FS: os.DirFS("/")})
			if err != nil {
				t.Fatal(err)
			}
			tc.opt.KeyFile = "cluster.key"
			res := Convert(nodes, tc.opt)
			checkLoads(t, res)
			checkEveryKeyword(t, abs, nodes, res)
			var out bytes.Buffer
			res.WriteFiles(&out)
			out.WriteString("# ==> report <==\n")
			res.WriteReport(&out)
			golden(t, filepath.Join("testdata", tc.name+".golden"), bytes.ReplaceAll(out.Bytes(), []byte(filepath.Dir(abs)), []byte(filepath.Join("testdata", tc.dir))))
		})
	}
}
