package config

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/cluster/identity"
)

// testIdentity writes a director's key file (mode 0600) into dir and
// returns its private key and public key line.
func testIdentity(t *testing.T, dir, name string, seed byte) (ed25519.PrivateKey, string) {
	t.Helper()
	k := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	if err := identity.WriteNew(filepath.Join(dir, name), k); err != nil {
		t.Fatal(err)
	}
	return k, identity.FormatPublic(identity.Public(k))
}

func TestClusterIdentity(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir, "cluster.key", testKey+"\n")
	key, pubA := testIdentity(t, dir, "a.key", 1)
	_, pubB := testIdentity(t, dir, "b.key", 2)
	_, pubOld := testIdentity(t, dir, "old.key", 3)
	p := writeFile(t, dir, "lvsd.yaml", `
node: a
interface: eth0
cluster:
  key_file: cluster.key
  identity_file: a.key
  directors:
    a: `+pubA+`
    b: "`+pubB+` `+pubOld+`"
`)
	a, err := LoadAgent(p)
	if err != nil {
		t.Fatal(err)
	}
	c := a.Cluster
	if c.IdentityFile != filepath.Join(dir, "a.key") || !key.Equal(c.Identity) {
		t.Fatalf("identity %s %x", c.IdentityFile, c.Identity)
	}
	want := map[string][]ed25519.PublicKey{"a": {mustPublic(t, pubA)}, "b": {mustPublic(t, pubB), mustPublic(t, pubOld)}}
	if !reflect.DeepEqual(c.Directors, want) {
		t.Fatalf("directors %v", c.Directors)
	}
	if w := c.Warnings(); w != nil {
		t.Errorf("warnings with directors: %v", w)
	}
}

func mustPublic(t *testing.T, s string) ed25519.PublicKey {
	t.Helper()
	k, err := identity.ParsePublic(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Without directors, an identity is optional; its absence is no error,
// and lvsd check warns that any key holder can speak for any director.
func TestClusterIdentityOptional(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir, "cluster.key", testKey+"\n")
	a, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", "interface: eth0\ncluster:\n  key_file: cluster.key\n  identity_file: "+dir+"/none.key\n  directors: null\n"))
	if err == nil {
		t.Fatalf("directors: null accepted: %+v", a.Cluster)
	}
	a, err = LoadAgent(writeFile(t, dir, "lvsd.yaml", "interface: eth0\ncluster:\n  key_file: cluster.key\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Cluster.Identity != nil || a.Cluster.Directors != nil {
		t.Fatalf("%+v", a.Cluster)
	}
	if w := a.Cluster.Warnings(); len(w) != 1 || !strings.Contains(w[0], "any holder of the cluster key can speak for any director") {
		t.Fatalf("warnings %v", w)
	}
	testIdentity(t, dir, "a.key", 1)
	a, err = LoadAgent(writeFile(t, dir, "lvsd.yaml", "interface: eth0\ncluster:\n  key_file: cluster.key\n  identity_file: a.key\n"))
	if err != nil || a.Cluster.Identity == nil {
		t.Fatalf("an identity without directors: %v", err)
	}
}

func TestClusterIdentityBad(t *testing.T) {
	const head = "node: a\ninterface: eth0\ncluster:\n  key_file: cluster.key\n"
	for _, c := range []struct{ name, body, want string }{
		{"identity_file missing", head + "  identity_file: nope.key\n", ":5:18: cluster identity_file |does not exist: create it with `lvsd keygen --out"},
		{"default identity missing with directors", head + "  identity_file: nope.key\n  directors: {a: PUBA}\n", ":5:18: cluster identity_file |does not exist"},
		{"identity not private", head + "  identity_file: open.key\n", ":5:18: cluster identity_file |open.key has mode 0644"},
		{"identity not a key", head + "  identity_file: cluster.key\n", ":5:18: cluster identity_file |cluster.key holds no PEM block"},
		{"this director not listed", head + "  identity_file: a.key\n  directors: {b: PUBB}\n", ":6:15: directors does not list this director (node \"a\"): add `a: PUBA`"},
		{"this director's key is another", head + "  identity_file: a.key\n  directors: {a: PUBB}\n", ":6:18: directors: the key listed for this director (node \"a\") is not the public key of"},
		{"key not base64", head + "  identity_file: a.key\n  directors: {a: PUBA, b: \"not-base64!\"}\n", "directors: b: public key \"not-base64!\" is not standard base64"},
		{"key too short", head + "  identity_file: a.key\n  directors: {a: PUBA, b: AAAA}\n", "directors: b: public key \"AAAA\" has 3 bytes, want 32"},
		{"no key", head + "  identity_file: a.key\n  directors: {a: PUBA, b: \" \"}\n", "directors: b has no public key"},
		{"empty", head + "  identity_file: a.key\n  directors: {}\n", "directors is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeKey(t, dir, "cluster.key", testKey+"\n")
			_, pubA := testIdentity(t, dir, "a.key", 1)
			_, pubB := testIdentity(t, dir, "open.key", 2)
			if err := os.Chmod(filepath.Join(dir, "open.key"), 0o644); err != nil {
				t.Fatal(err)
			}
			body := strings.NewReplacer("PUBA", pubA, "PUBB", pubB).Replace(c.body)
			want := strings.NewReplacer("PUBA", pubA, "PUBB", pubB).Replace(c.want)
			_, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", body))
			if err == nil {
				t.Fatalf("no error for:\n%s", body)
			}
			at, rest, cut := strings.Cut(want, "|")
			if !cut {
				at, rest = "", want
			}
			if !strings.Contains(err.Error(), "lvsd.yaml"+at) || !strings.Contains(err.Error(), rest) {
				t.Errorf("error %q does not contain %q and %q", err, "lvsd.yaml"+at, rest)
			}
		})
	}
}
