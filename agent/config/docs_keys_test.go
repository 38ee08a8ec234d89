package config

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// referencePage is the configuration reference, from which lvsd.yaml(5) is
// generated: an operator looks a key up there and nowhere else.
const referencePage = "../../docs/configuration.md"

// A key is spelled with its full dotted path from the top of its file
// (`cluster.conn_sync.port`). A key of the items of a list is spelled after
// the list's own key, without an index: `bgp.peers.hold_time` is the
// hold_time of each entry of bgp.peers, `health.checks.tls.verify` the
// verify of each check. Blocks (a mapping, a list of mappings) are keys
// too: their row says what the block is for and what its absence means.

// nestedForms are the only keys the reference may leave without a row of
// their own: every key under prefix (in file) reads exactly as the key of
// the same name under sameAs, which has its row, and the row of the block
// (prefix without its dot) says so. One row per meaning keeps the
// reference from drifting apart.
var nestedForms = []struct {
	file, prefix, sameAs, reason string
}{
	{"service", "announce.", "bgp.announce.", "a service's announce block takes the keys of bgp.announce, with their meaning, and replaces that block for its VIP"},
	{"service", "backends.health.checks.", "health.checks.", "a backend's own checks are service checks, with the same types and keys"},
	{"agent", "track.checks.", "health.checks.", "the track block's checks are service checks, with the same types and keys"},
}

// fileKeys are the dotted keys of both kinds of file, read off the yaml
// tags of the types their decoder reads: a new field cannot be missed.
func fileKeys() map[string]map[string]bool {
	return map[string]map[string]bool{
		"agent":   yamlKeyPaths(reflect.TypeOf(rawAgent{})),
		"service": yamlKeyPaths(reflect.TypeOf(rawService{})),
	}
}

func yamlKeyPaths(t reflect.Type) map[string]bool {
	keys := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case name == "-":
			case strings.Contains(opts, "inline") || (name == "" && f.Anonymous):
				walk(f.Type, prefix)
			case name != "":
				keys[prefix+name] = true
				walk(f.Type, prefix+name+".")
			}
		}
	}
	walk(t, "")
	return keys
}

var backticked = regexp.MustCompile("`([^`]+)`")

// referenceRows returns the keys that have a row in the reference: the
// backticked names in the first cell of a table whose header's first cell
// is "key", each with the lines of its rows.
func referenceRows(t *testing.T) map[string][]int {
	t.Helper()
	text, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]int{}
	inTable, keyTable := false, false
	for n, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		first := strings.TrimSpace(strings.Split(line, "|")[1])
		if !inTable {
			inTable, keyTable = true, first == "key"
			continue
		}
		if !keyTable {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			rows[m[1]] = append(rows[m[1]], n+1)
		}
	}
	return rows
}

// TestReferenceListsEveryKey: every key of the agent file and of a service
// file has a row in docs/configuration.md, under its full dotted path, and
// every row names a key that exists, once.
func TestReferenceListsEveryKey(t *testing.T) {
	keys, rows := fileKeys(), referenceRows(t)
	for _, kind := range []string{"agent", "service"} {
		var names []string
		for k := range keys[kind] {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, key := range names {
			if _, ok := rows[key]; ok {
				continue
			}
			if target, ok := nestedFormOf(kind, key); ok {
				if _, ok := rows[target]; !ok {
					t.Errorf("%s file key %s: it reads as %s, which has no row in docs/configuration.md either", kind, key, target)
				}
				continue
			}
			t.Errorf("%s file key %s: no row in docs/configuration.md (a key table whose first cell is `%s`)", kind, key, key)
		}
	}
	var named []string
	for row := range rows {
		named = append(named, row)
	}
	sort.Strings(named)
	for _, row := range named {
		lines := rows[row]
		switch {
		case !keys["agent"][row] && !keys["service"][row]:
			t.Errorf("docs/configuration.md:%d: `%s` is in a key table's first cell but is no key of the agent file or a service file", lines[0], row)
		case len(lines) > 1:
			t.Errorf("docs/configuration.md:%v: `%s` has %d rows; one key, one row", lines, row, len(lines))
		}
	}
}

// nestedFormOf says which documented key key reads as, if it is one of the
// nestedForms.
func nestedFormOf(kind, key string) (string, bool) {
	for _, n := range nestedForms {
		if n.file == kind && strings.HasPrefix(key, n.prefix) {
			return n.sameAs + strings.TrimPrefix(key, n.prefix), true
		}
	}
	return "", false
}

// TestNestedFormsAreReal keeps the exemptions honest: each covers keys that
// exist, and each of them has its counterpart in the file it reads like.
func TestNestedFormsAreReal(t *testing.T) {
	keys := fileKeys()
	for _, n := range nestedForms {
		t.Run(n.file+":"+n.prefix, func(t *testing.T) {
			block := strings.TrimSuffix(n.prefix, ".")
			if !keys[n.file][block] {
				t.Fatalf("%s file has no key %s", n.file, block)
			}
			targetFile := "agent"
			if !keys["agent"][strings.TrimSuffix(n.sameAs, ".")] {
				targetFile = "service"
			}
			covered := 0
			for key := range keys[n.file] {
				rest, ok := strings.CutPrefix(key, n.prefix)
				if !ok {
					continue
				}
				covered++
				if !keys[targetFile][n.sameAs+rest] {
					t.Errorf("%s file key %s has no counterpart %s%s: it is not a nested form (%s)", n.file, key, n.sameAs, rest, n.reason)
				}
			}
			if covered == 0 {
				t.Errorf("no %s file key starts with %s", n.file, n.prefix)
			}
		})
	}
}
