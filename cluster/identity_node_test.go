package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

func seededKey(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

// With cluster.directors, a holder of the cluster key that is not a
// listed director, or a listed one speaking for another, is refused:
// the VIP stays, the victim stays live and is never marked as left.
func TestNodeIdentitiesRefuseImpersonation(t *testing.T) {
	keys := map[string]ed25519.PrivateKey{"a": seededKey(1), "b": seededKey(2)}
	dirs := map[string][]ed25519.PublicKey{"a": {identity.Public(keys["a"])}, "b": {identity.Public(keys["b"])}}
	nodes := startNodesWith(t, func(c *Config) {
		c.Identity = &identity.Keys{Private: keys[c.Name], Directors: dirs}
	}, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	a, b := nodes[0], nodes[1]
	intruder := seededKey(3)
	now := uint64(time.Now().UnixNano())
	forge := func(hb heartbeat, k ed25519.PrivateKey, v byte) {
		for _, p := range hb.encodeAs(v, &identity.Keys{Private: k}) {
			delegate{b.Node}.NotifyMsg(p)
		}
	}
	claim := []vipClaim{{vip1, true}}
	for range 5 {
		// a host with the cluster key and a name of its own, ranked first
		forge(heartbeat{Name: "c", Addr: "127.0.0.1:1", Incarnation: now, Seq: 1, Priority: 1000, Ready: true, VIPs: claim, Heard: []uint64{b.incarnation}}, intruder, hbVersion)
		// b (a listed director) speaking for a: it leaves, it is old news, it claims nothing
		forge(heartbeat{Name: "a", Addr: a.Address(), Incarnation: a.incarnation, Seq: math.MaxUint32, Leaving: true}, keys["b"], hbVersion)
		forge(heartbeat{Name: "a", Addr: a.Address(), Incarnation: math.MaxUint64, Seq: 1, Heard: []uint64{b.incarnation}}, keys["a"], hbVersion)
		forge(heartbeat{Name: "a", Addr: a.Address(), Incarnation: a.incarnation, Seq: math.MaxUint32}, nil, hbVersionV3)
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // two failure timeouts: a forged Leaving or incarnation would show by now
	waitHolders(t, nodes, vip1, time.Second, "a")
	v, err := b.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range v.Members {
		if m.Name == "c" || m.Name == "a" && !m.Live {
			t.Errorf("b's view of %s: %+v", m.Name, m)
		}
	}
	want := map[string]uint64{"unknown name": 5, "bad signature": 5, refusedFuture: 5, "unsigned": 5}
	for k, n := range want {
		if v.Refused[k] != n {
			t.Errorf("refused %v, want %v", v.Refused, want)
			break
		}
	}
	if !v.IdentitiesEnforced || !v.Signed {
		t.Errorf("view says signed %v, enforced %v", v.Signed, v.IdentitiesEnforced)
	}
	if got := strings.Count(b.log.String(), "does not prove its sender"); got != 3 {
		t.Errorf("%d refusal warnings for 15 forged heartbeats of 3 kinds, want 3", got)
	}
}

// A director that signs beside one that does not, without directors:
// they hear each other (v4 both ways), so a fleet switches identities on
// one director at a time.
func TestNodeSignedBesideUnsigned(t *testing.T) {
	nodes := startNodesWith(t, func(c *Config) {
		if c.Name == "a" {
			c.Identity = &identity.Keys{Private: seededKey(1)}
		}
	}, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	for _, n := range nodes {
		v, _ := n.View(context.Background())
		if len(v.Members) != 2 || v.Members[1].WireVersion != hbVersion {
			t.Errorf("%s's view: %+v", n.cfg.Name, v.Members)
		}
	}
	nodes[0].tr.cut.Store(true)
	waitHolders(t, nodes[1:], vip1, 5*time.Second, "b")
}
