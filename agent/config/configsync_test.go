package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestClusterConfigSync(t *testing.T) {
	const head = "node: a\ninterface: eth0\ncluster:\n  key_file: cluster.key\n  identity_file: a.key\n"
	const ids = "  directors: {a: PUBA, b: PUBB}\n"
	for _, c := range []struct {
		name, body string
		want       string   // an error with this (file:line:col|message), or none
		sources    []string // with no error
	}{
		{"off by default", head + ids, "", nil},
		{"on with sources", head + ids + "  config_sync: true\n  config_sources: [a, b]\n", "", []string{"a", "b"}},
		{"without identities", head + "  config_sync: true\n  config_sources: [a]\n", ":6:16: config_sync needs identities", nil},
		{"without sources", head + ids + "  config_sync: true\n", ":7:16: config_sync needs config_sources", nil},
		{"source not a director", head + ids + "  config_sync: true\n  config_sources: [a, c]\n", ":8:23: config source \"c\" is not in cluster.directors", nil},
		{"source twice", head + ids + "  config_sync: true\n  config_sources: [b, b]\n", ":8:23: config source \"b\" is listed twice", nil},
		{"sources without sync", head + ids + "  config_sources: [a]\n", ":7:19: config_sources is set but config_sync is not true", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeKey(t, dir, "cluster.key", testKey+"\n")
			_, pubA := testIdentity(t, dir, "a.key", 1)
			_, pubB := testIdentity(t, dir, "b.key", 2)
			body := strings.NewReplacer("PUBA", pubA, "PUBB", pubB).Replace(c.body)
			a, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", body))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if a.Cluster.ConfigSync != (c.sources != nil) || !reflect.DeepEqual(a.Cluster.ConfigSources, c.sources) {
					t.Errorf("config_sync %v, sources %v; want sources %v", a.Cluster.ConfigSync, a.Cluster.ConfigSources, c.sources)
				}
				return
			}
			at, rest, _ := strings.Cut(c.want, "|")
			if err == nil || !strings.Contains(err.Error(), "lvsd.yaml"+at) || !strings.Contains(err.Error(), rest) {
				t.Errorf("error %v, want one with %q and %q", err, "lvsd.yaml"+at, rest)
			}
		})
	}
}
