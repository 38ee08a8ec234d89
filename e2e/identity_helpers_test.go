//go:build e2e

package e2e

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/cluster/identity"
	"github.com/lvsd/lvsd/e2e/topo"
)

// Helpers of the identity tests: directors with identity files and a
// cluster.directors map, and an injector that holds the cluster key and
// writes heartbeats and relay messages as a director would, signed with
// whatever key it is given.

// identityCluster starts one lvsd per director of tp with an identity
// each and cluster.directors listing all of them, as startCluster does
// otherwise; it returns the processes and the directors' private keys by
// ID (the injector signs with them).
func identityCluster(t *testing.T, tp *topo.Topology, key, extra string, vips ...netip.Addr) ([]*lvsd, map[string]ed25519.PrivateKey) {
	t.Helper()
	keys := map[string]ed25519.PrivateKey{}
	var listed []string
	for _, d := range tp.Directors() {
		k, err := identity.Generate(nil)
		if err != nil {
			t.Fatal(err)
		}
		keys[d.ID] = k
		listed = append(listed, fmt.Sprintf("%s: %s", d.ID, identity.FormatPublic(identity.Public(k))))
	}
	block := fmt.Sprintf("  identity_file: identity.key\n  directors: {%s}\n", strings.Join(listed, ", "))
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, extra+block+fmt.Sprintf("  priority: %d\n", 250-50*i), vips...)
		if err := identity.WriteNew(filepath.Join(l.dir, "identity.key"), keys[d.ID]); err != nil {
			t.Fatal(err)
		}
		if out, code := runLVSD(t, d, "check", "--config", filepath.Join(l.dir, "lvsd.yaml")); code != 0 || strings.Contains(out, "warning") {
			t.Fatalf("lvsd check on %s: exit %d: %s", d.ID, code, out)
		}
		l.start()
		ds = append(ds, l)
	}
	return ds, keys
}

// incarnation reads the incarnation a director's lvsd runs with from its
// state directory.
func incarnation(t *testing.T, l *lvsd) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(l.dir, "state", "incarnation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Incarnation uint64 `json:"incarnation"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Incarnation
}

// forgedHeartbeat is a heartbeat as cluster/heartbeat.go encodes it (one
// part), written here from the documented layout so that the test does
// not lean on the code under test.
type forgedHeartbeat struct {
	name, addr       string
	incarnation, seq uint64
	priority         int32
	ready, leaving   bool
	heard            []uint64
	claims           []netip.Addr // held
	down             []uint64     // with them, a health vote
	version          byte         // 3 or 4
	key              ed25519.PrivateKey
}

func (h forgedHeartbeat) encode() []byte {
	var flags byte
	if h.ready {
		flags |= 1
	}
	if h.leaving {
		flags |= 2
	}
	if h.down != nil {
		flags |= 4
	}
	if h.version >= 4 && h.key != nil {
		flags |= 8
	}
	b := []byte{'H', h.version, flags, 0, 1}
	b = binary.BigEndian.AppendUint64(b, h.incarnation)
	b = binary.BigEndian.AppendUint64(b, h.seq)
	b = binary.BigEndian.AppendUint32(b, uint32(h.priority))
	b = append(append(b, byte(len(h.name))), h.name...)
	b = append(append(b, byte(len(h.addr))), h.addr...)
	b = append(b, byte(len(h.heard)))
	for _, inc := range h.heard {
		b = binary.BigEndian.AppendUint64(b, inc)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.claims)))
	for _, c := range h.claims {
		b = append(append(b, 1), c.AsSlice()...) // held, IPv4
	}
	if h.down != nil {
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.down)))
		for _, id := range h.down {
			b = binary.BigEndian.AppendUint64(b, id)
		}
	}
	return seal(b, h.version, h.key)
}

// seal ends a v4 message with its trailer: no extensions, then the
// signature when signed.
func seal(b []byte, version byte, key ed25519.PrivateKey) []byte {
	if version < 4 {
		return b
	}
	b = append(b, 0, 0)
	if key != nil {
		b = append(b, ed25519.Sign(key, b)...)
	}
	return b
}

// signedMessage is s.message in version 4, signed with key (nil: unsigned).
func (s *syncSender) signedMessage(client netip.AddrPort, vip, rs netip.Addr, key ed25519.PrivateKey) []byte {
	m := s.message(client, vip, rs)
	m[1] = 4
	if key != nil {
		m[2] |= 16
	}
	return seal(m, 4, key)
}
