package servicesdir

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
)

// countingCache is a Cache on the real file system that counts what it
// asks of it.
type countingCache struct {
	*Cache
	stats, reads, lists int
}

func newCountingCache() *countingCache {
	c := &countingCache{Cache: NewCache()}
	c.Stat = func(p string) (fs.FileInfo, error) { c.stats++; return os.Stat(p) }
	c.Read = func(p string) ([]byte, error) { c.reads++; return config.ReadServiceFile(p, false, nil) }
	c.ReadDir = func(d string) ([]fs.DirEntry, error) { c.lists++; return os.ReadDir(d) }
	return c
}

func (c *countingCache) reset() { c.stats, c.reads, c.lists = 0, 0, 0 }

// A reload reads only the files whose stamp changed and parses only those
// whose content did; with the changed paths known it stats only those.
func TestCacheReadsWhatChanged(t *testing.T) {
	dir := t.TempDir()
	body := func(i, weight int) string {
		return fmt.Sprintf("service: s%d\nvip: 10.0.0.50\nports: [%d]\nbackends: [{address: 10.0.0.11, weight: %d}]\n", i, 1000+i, weight)
	}
	for i := range 5 {
		writeFile(t, dir, fmt.Sprintf("s%d.yaml", i), body(i, 1))
	}
	c := newCountingCache()
	first, err := c.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Services) != 5 || c.reads != 5 {
		t.Fatalf("cold: %d services, %d reads", len(first.Services), c.reads)
	}

	c.reset()
	again, err := c.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.lists != 1 || c.stats != 5 || c.reads != 0 {
		t.Errorf("unchanged scan: %d lists, %d stats, %d reads; want 1, 5, 0", c.lists, c.stats, c.reads)
	}
	for i := range again.Files {
		if again.Files[i] != first.Files[i] {
			t.Errorf("unchanged %s is a new reading", again.Files[i].Path)
		}
	}

	// Touched, same content: read (the stamp changed), not parsed again.
	touched := filepath.Join(dir, "s1.yaml")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(touched, later, later); err != nil {
		t.Fatal(err)
	}
	c.reset()
	set, err := c.Load(&config.Agent{ServicesDir: dir}, []string{touched})
	if err != nil {
		t.Fatal(err)
	}
	if c.lists != 0 || c.stats != 1 || c.reads != 1 || set.Files[1] != first.Files[1] {
		t.Errorf("touched: %d lists, %d stats, %d reads, same reading %v; want 0, 1, 1, true",
			c.lists, c.stats, c.reads, set.Files[1] == first.Files[1])
	}

	// Changed, a file added, a file removed: only those are looked at.
	changed := writeFile(t, dir, "s2.yaml", body(2, 7))
	added := writeFile(t, dir, "s9.yaml", body(9, 1))
	removed := filepath.Join(dir, "s0.yaml")
	if err := os.Remove(removed); err != nil {
		t.Fatal(err)
	}
	c.reset()
	set, err = c.Load(&config.Agent{ServicesDir: dir}, []string{changed, added, removed})
	if err != nil {
		t.Fatal(err)
	}
	if c.lists != 0 || c.stats != 3 || c.reads != 2 {
		t.Errorf("edits: %d lists, %d stats, %d reads; want 0, 3, 2", c.lists, c.stats, c.reads)
	}
	var names []string
	for _, s := range set.Services {
		names = append(names, fmt.Sprintf("%s/%d", s.Name, s.Backends[0].Weight))
	}
	if fmt.Sprint(names) != "[s1/1 s2/7 s3/1 s4/1 s9/1]" {
		t.Errorf("services %v", names)
	}
	if set.Files[0] != first.Files[1] || set.Files[1] == first.Files[2] {
		t.Error("the unchanged file was read anew, or the changed one was not")
	}
}

// A file that fails to parse is reported again at every load, until it is
// fixed, even when it did not change.
func TestCacheKeepsProblems(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", "service: web\nvip: nonsense\n")
	c := newCountingCache()
	for range 2 {
		if _, err := c.LoadDir(dir); err == nil {
			t.Fatal("a broken file loaded")
		}
	}
	writeFile(t, dir, "bad.yaml", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
	if _, err := c.Load(&config.Agent{ServicesDir: dir}, []string{bad}); err != nil {
		t.Fatalf("fixed: %v", err)
	}
}

// Whatever the history of edits, creations and removals, a reload of the
// files that changed gives the set a fresh load of the directory gives:
// the same files, in name order, with the same services.
func TestCacheScopedReloadsEqualAFreshLoad(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	body := func(i, weight int) string {
		return fmt.Sprintf("service: s%d\nvip: 10.0.0.50\nports: [%d]\nbackends: [{address: 10.0.0.11, weight: %d}]\n", i, 1000+i, weight)
	}
	c := NewCache()
	if _, err := c.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	exists := map[int]bool{}
	for round := range 60 {
		var changed []string
		for range 1 + rng.IntN(4) {
			i := rng.IntN(30)
			name := fmt.Sprintf("s%02d.yaml", i)
			switch {
			case exists[i] && rng.IntN(3) == 0:
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
				delete(exists, i)
			default:
				writeFile(t, dir, name, body(i, 1+rng.IntN(9)))
				exists[i] = true
			}
			changed = append(changed, filepath.Join(dir, name))
		}
		got, err := c.Load(&config.Agent{ServicesDir: dir}, changed)
		if err != nil {
			t.Fatal(err)
		}
		want, err := NewCache().LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := describeSet(got), describeSet(want); g != w {
			t.Fatalf("round %d, %q changed:\n got %s\nwant %s", round, changed, g, w)
		}
	}
}

func describeSet(s Set) string {
	var b strings.Builder
	for _, f := range s.Files {
		fmt.Fprintf(&b, "%s:", filepath.Base(f.Path))
		for _, svc := range f.Services {
			fmt.Fprintf(&b, " %s/%d", svc.Name, svc.Backends[0].Weight)
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "(%d services)", len(s.Services))
	return b.String()
}

// A scoped reload checks only what the changed files may conflict with
// (checkChanged); whatever the edits, it must refuse exactly the services a
// full check of the same files refuses, and accept what it accepts. The
// services are drawn from small pools of names, VIPs, protocols, ports and
// source ranges so that conflicts of every kind come and go.
func TestScopedCheckFindsWhatAFullCheckFinds(t *testing.T) {
	// setOrder is a set's files and services (file:line name) in order.
	setOrder := func(set Set) string {
		var b strings.Builder
		for _, f := range set.Files {
			fmt.Fprintf(&b, "[%s] ", filepath.Base(f.Path))
		}
		for _, s := range set.Services {
			fmt.Fprintf(&b, "%s:%d %s %v; ", filepath.Base(s.File), s.Line, s.Name, s.Ports)
		}
		return b.String()
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	body := func(i int) string {
		var b strings.Builder
		for j := range 1 + rng.IntN(2) {
			name, vip := fmt.Sprintf("s%d-%d", i, j), pick("10.0.0.50", "10.0.0.51")
			if rng.IntN(40) == 0 {
				// A name twice, often on VIPs no other service has.
				name, vip = pick("dup-a", "dup-b"), pick("10.0.0.50", "10.0.0.51", "10.0.0.52", "10.0.0.53")
			}
			proto, ports := pick("tcp", "tcp", "udp"), fmt.Sprint(1000+i*10+j)
			switch rng.IntN(50) {
			case 0:
				ports = "all"
			case 1:
				proto, ports = "any", "all"
			case 2, 3, 4, 5, 6, 7:
				ports = fmt.Sprintf("%d-%d", 1000+i*10, 1000+i*10+15) // into the next file's
			}
			fmt.Fprintf(&b, "---\nservice: %s\nvip: %s\nprotocol: %s\nports: [%s]\n", name, vip, proto, ports)
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, "source_ranges: [%s]\n", pick("192.0.2.0/24", "198.51.100.0/24"))
			}
			b.WriteString("backends: [{address: 10.0.0.11}]\n")
		}
		return b.String()
	}
	positions := func(err error) string {
		var l config.List
		if !errors.As(err, &l) {
			return fmt.Sprint(err)
		}
		var out []string
		for _, e := range l {
			out = append(out, fmt.Sprintf("%s:%d", filepath.Base(e.File), e.Line))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	c := NewCache()
	if _, err := c.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	exists := map[int]bool{}
	scopedAccepted, scopedRefused := 0, 0 // rounds after an accepted one: checkChanged's
	lastAccepted := true
	patched := 0 // rounds that start from the last accepted set (patch)
	for round := range 800 {
		var changed []string
		for range 1 + rng.IntN(3) {
			i := rng.IntN(20)
			name := fmt.Sprintf("f%02d.yaml", i)
			if exists[i] && rng.IntN(3) == 0 {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
				delete(exists, i)
			} else if rng.IntN(30) == 0 {
				writeFile(t, dir, name, "service: [\n") // a problem: not patched
				exists[i] = true
			} else {
				writeFile(t, dir, name, body(i))
				exists[i] = true
			}
			changed = append(changed, filepath.Join(dir, name))
		}
		if c.last.valid {
			patched++
		}
		set, got := c.Load(&config.Agent{ServicesDir: dir}, changed)
		full, want := NewCache().LoadDir(dir)
		if g, w := positions(got), positions(want); g != w {
			t.Fatalf("round %d, %q changed: scoped check refused [%s], a full check [%s]\nscoped: %v\nfull: %v", round, changed, g, w, got, want)
		}
		if g, w := setOrder(set), setOrder(full); g != w {
			t.Fatalf("round %d, %q changed: the load returned\n%s\na full load\n%s", round, changed, g, w)
		}
		switch {
		case lastAccepted && want == nil:
			scopedAccepted++
		case lastAccepted:
			scopedRefused++
		}
		lastAccepted = want == nil
	}
	if patched < 100 {
		t.Errorf("%d rounds started from the last accepted set", patched)
	}
	if scopedAccepted < 100 || scopedRefused < 15 {
		t.Errorf("after an accepted set, %d rounds accepted and %d refused: the pools do not exercise both", scopedAccepted, scopedRefused)
	}
}
