package configsync

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/cluster/identity"
)

// testKeys returns the keys of director name in a cluster of dir1..dir3.
func testKeys(t testing.TB, name string) *identity.Keys {
	t.Helper()
	dirs := map[string][]ed25519.PublicKey{}
	var own ed25519.PrivateKey
	for i, n := range []string{"dir1", "dir2", "dir3"} {
		priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize))
		dirs[n] = []ed25519.PublicKey{identity.Public(priv)}
		if n == name {
			own = priv
		}
	}
	return &identity.Keys{Private: own, Directors: dirs}
}

func TestRecordRoundTrip(t *testing.T) {
	keys := testKeys(t, "dir1")
	tests := []Record{
		{Publisher: "dir1", Version: 42, Name: "web.yaml", Path: "/etc/lvsd/services.d/web.yaml", Data: []byte("services: []\n")},
		{Publisher: "dir1", Version: 43, Name: "web.yaml", Path: "/etc/lvsd/services.d/web.yaml", Deleted: true},
	}
	for _, want := range tests {
		wire, err := EncodeRecord(want, keys)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(wire, testKeys(t, "dir2"))
		if err != nil {
			t.Fatal(err)
		}
		got := m.Record
		if got == nil || got.Publisher != want.Publisher || got.Version != want.Version || got.Deleted != want.Deleted ||
			got.Name != want.Name || got.Path != want.Path || !bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Wire, wire) {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}
}

func TestDigestAndInventoryRoundTrip(t *testing.T) {
	keys := testKeys(t, "dir2")
	d := Digest{Sender: "dir2", Records: 3}
	d.Sum[0] = 9
	m, err := Decode(EncodeDigest(d, keys), keys)
	if err != nil || m.Digest == nil || *m.Digest != d {
		t.Fatalf("digest: %+v, %v", m.Digest, err)
	}
	inv := Inventory{Sender: "dir2", Entries: []Entry{{Name: "a.yaml", Stamp: Stamp{Version: 1, Publisher: "dir1"}}, {Name: "b.yml", Stamp: Stamp{Version: 2, Publisher: "dir3", Deleted: true}}}}
	m, err = Decode(EncodeInventory(inv, keys), keys)
	if err != nil || m.Inventory == nil || len(m.Inventory.Entries) != 2 || m.Inventory.Entries[1] != inv.Entries[1] {
		t.Fatalf("inventory: %+v, %v", m.Inventory, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := EncodeRecord(Record{Publisher: "dir1", Version: 1, Name: "web.yaml", Data: []byte("x")}, testKeys(t, "dir1"))
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := EncodeRecord(Record{Publisher: "dir1", Version: 1, Name: "web.yaml", Data: []byte("x")}, testKeys(t, "dir2"))
	stranger := testKeys(t, "dir1")
	stranger.Directors = map[string][]ed25519.PublicKey{"dir9": stranger.Directors["dir1"]}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-identity.SignatureSize-1] ^= 1
	tests := []struct {
		name string
		msg  []byte
		keys *identity.Keys
		want string
	}{
		{"signed by another director", forged, testKeys(t, "dir3"), "bad signature"},
		{"changed after signing", flipped, testKeys(t, "dir3"), "bad signature"},
		{"publisher not a director", good, stranger, "unknown name"},
		{"no directors to check against", good, &identity.Keys{}, "cluster.directors"},
		{"truncated", good[:10], testKeys(t, "dir3"), "truncated"},
		{"other version", append([]byte{Magic, 9}, good[2:]...), testKeys(t, "dir3"), "version 9"},
		{"unknown kind", append([]byte{Magic, Version, 7}, good[3:]...), testKeys(t, "dir3"), "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.msg, tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestEncodeRecordRefusesBadNames(t *testing.T) {
	keys := testKeys(t, "dir1")
	for _, name := range []string{"", ".hidden.yaml", "../etc/passwd.yaml", "a/b.yaml", "web.conf", strings.Repeat("a", 300) + ".yaml"} {
		if _, err := EncodeRecord(Record{Publisher: "dir1", Name: name}, keys); err == nil {
			t.Errorf("EncodeRecord took the name %q", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	keys := testKeys(f, "dir1")
	rec, _ := EncodeRecord(Record{Publisher: "dir1", Version: 7, Name: "web.yaml", Path: "/x/web.yaml", Data: []byte("a: b\n")}, keys)
	f.Add(rec)
	f.Add(EncodeDigest(Digest{Sender: "dir1", Records: 1}, keys))
	f.Add(EncodeInventory(Inventory{Sender: "dir1", Entries: []Entry{{Name: "web.yaml", Stamp: Stamp{Version: 7, Publisher: "dir1"}}}}, keys))
	// The form is checked before the signature: mutations of the seeds
	// reach every bound, and only what dir1 signed passes.
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, keys)
		if err != nil {
			return
		}
		if m.Signer() == "" {
			t.Fatalf("accepted a message without a signer: %+v", m)
		}
		if m.Record != nil {
			if again, err := EncodeRecord(*m.Record, keys); err != nil || !bytes.Equal(again, b) {
				t.Fatalf("record does not encode back to what was decoded: %v", err)
			}
		}
	})
}
