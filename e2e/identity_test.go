//go:build e2e

package e2e

import (
	"encoding/base64"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/cluster/identity"
)

// TestImpersonation: three directors with identities (cluster.directors).
// An injector on the client holds the cluster key and speaks for the VIP's
// holder, "director", to a standby: (a) as a host with no configured
// identity, which also claims the VIP under a name of its own, ranked
// first; (b) with the key of director3, a configured director. It sends
// heartbeats saying the holder leaves, claims nothing or votes targets
// down, one of incarnation 2^64-1 (which, taken, would make every real
// heartbeat of the holder look old), and connection records in the
// holder's name. All are refused, counted and logged once per sender and
// kind; the holder keeps its VIP and its clients' connections, and the
// standby never counts it as left or failed. The controls: a record
// signed with the holder's own key is applied, and the holder's real
// heartbeats keep counting.
func TestImpersonation(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	ckey := clusterKey(t)
	ds, keys := identityCluster(t, tp, ckey, "", vip)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	time.Sleep(3500 * time.Millisecond) // the cluster's release grace, as syncCluster waits it out
	waitHolders(t, tp, vip, time.Second, onlyOn("director"))
	shared, err := base64.StdEncoding.DecodeString(ckey)
	if err != nil {
		t.Fatal(err)
	}
	holder, target := ds[0], ds[1]
	intruderKey, err := identity.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	self := incarnation(t, target) // echoed: a name the standby has no memory of must prove it heard it
	victim := incarnation(t, holder)

	tl := startTimeline(t, tp, []netip.Addr{vip})
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 100*time.Millisecond)
	start := time.Now()
	hb := func(h forgedHeartbeat) []byte {
		if h.version == 0 {
			h.version = 4
		}
		if h.addr == "" {
			h.addr = holder.host.V4.String() + ":7946"
		}
		return h.encode()
	}
	type attack struct {
		what string
		msg  []byte
	}
	var attacks []attack
	add := func(what string, msg []byte) { attacks = append(attacks, attack{what, msg}) }
	seq := uint64(math.MaxUint32)
	// (a) no configured identity
	add("an unknown name claiming the VIP, ranked first", hb(forgedHeartbeat{name: "intruder", addr: tp.Client().V4.String() + ":7946",
		incarnation: uint64(time.Now().UnixNano()), seq: 1, priority: 1000, ready: true, heard: []uint64{self}, claims: []netip.Addr{vip}, key: intruderKey}))
	add("the holder leaving, unsigned v3", hb(forgedHeartbeat{name: "director", incarnation: victim, seq: seq, leaving: true, version: 3}))
	add("the holder leaving, unsigned v4", hb(forgedHeartbeat{name: "director", incarnation: victim, seq: seq + 1, leaving: true}))
	// (b) director3's key speaking for the holder
	add("the holder leaving", hb(forgedHeartbeat{name: "director", incarnation: victim, seq: seq + 2, leaving: true, key: keys["director3"]}))
	add("the holder claiming nothing", hb(forgedHeartbeat{name: "director", incarnation: victim, seq: seq + 3, ready: true, priority: 250, key: keys["director3"]}))
	add("the holder voting targets down", hb(forgedHeartbeat{name: "director", incarnation: victim, seq: seq + 4, ready: true, priority: 250,
		claims: []netip.Addr{vip}, down: []uint64{1, 2, 3}, key: keys["director3"]}))
	add("the holder at incarnation 2^64-1", hb(forgedHeartbeat{name: "director", incarnation: math.MaxUint64, seq: 1, ready: true,
		heard: []uint64{self}, key: keys["director3"]}))
	rs := tp.RS(1).V4
	client := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("10.0.0.200"), port) }
	forgedConns := []netip.AddrPort{client(41001), client(41002), client(41003), client(41004)}
	add("records from an unknown name", newSyncSender("intruder").signedMessage(forgedConns[0], vip, rs, intruderKey))
	add("records in the holder's name, v3", newSyncSender("director").message(forgedConns[1], vip, rs))
	add("records in the holder's name, unsigned v4", newSyncSender("director").signedMessage(forgedConns[2], vip, rs, nil))
	add("records in the holder's name, signed by director3", newSyncSender("director").signedMessage(forgedConns[3], vip, rs, keys["director3"]))
	for round := range 3 {
		for _, a := range attacks {
			sendSync(t, tp.Client(), shared, target.host, a.msg)
		}
		if round == 0 {
			var whats []string
			for _, a := range attacks {
				whats = append(whats, a.what)
			}
			t.Logf("sending %d forged messages, three copies each, in 3 rounds: %s", len(attacks), strings.Join(whats, "; "))
		}
		time.Sleep(time.Second)
	}
	// The control: the holder's own key.
	signed := client(41005)
	sendSync(t, tp.Client(), shared, target.host, newSyncSender("director").signedMessage(signed, vip, rs, keys["director"]))
	waitConn(t, target.host, signed, "a record signed with the holder's key")
	time.Sleep(2 * time.Second) // past two failure timeouts: a forged Leaving or a poisoned incarnation would show now
	end := time.Now()
	v := statusPart[cluster.View](t, target.host, "cluster")
	st := statusPart[connsync.Stats](t, target.host, "conn_sync")
	tl.close()
	p.close()
	log := target.log()

	if !tl.firstAfter(vip, start, func(h []string) bool { return !slices.Equal(h, []string{"director"}) }).IsZero() {
		t.Errorf("the VIP moved during the attack:\n%s", tl)
	}
	if gap := p.gap(start, end); gap > time.Second {
		t.Errorf("clients of the VIP could not connect for %v during the attack", gap)
	}
	for _, m := range v.Members {
		switch {
		case m.Name == "intruder":
			t.Errorf("%s counts the intruder: %+v", target.host.ID, m)
		case m.Name == "director" && (!m.Live || !slices.Contains(m.Holds, vip.String())):
			t.Errorf("%s's view of the holder after the attack: %+v", target.host.ID, m)
		}
	}
	for _, vv := range v.VIPs {
		if vv.Owner != "director" {
			t.Errorf("%s's view: %s owned by %q", target.host.ID, vv.VIP, vv.Owner)
		}
	}
	conns := ipvsConns(t, target.host)
	for _, c := range forgedConns {
		if strings.Contains(conns, c.String()) {
			t.Errorf("a forged record of %s reached the IPVS table:\n%s", c, conns)
		}
	}
	t.Logf("%s refused heartbeats %v; relay messages: %d unproven, %d from the future; applied %d records",
		target.host.ID, v.Refused, st.DroppedUnproven, st.DroppedFuture, st.AppliedRecords)
	// Each message went 3 rounds × 3 copies.
	for reason, n := range map[string]uint64{"unknown name": 9, "unsigned": 18, "bad signature": 27, "future incarnation": 9} {
		if v.Refused[reason] < n {
			t.Errorf("refused %d heartbeats as %q, want at least %d: %v", v.Refused[reason], reason, n, v.Refused)
		}
	}
	if st.DroppedUnproven < 36 {
		t.Errorf("%d relay messages refused as unproven, want 36 (4 messages, 3 rounds, 3 copies)", st.DroppedUnproven)
	}
	// Logged once per sender and kind: intruder (unknown name), director
	// (unsigned, bad signature); the incarnation once.
	if n := countLines(log, "refused a heartbeat that does not prove its sender"); n != 3 {
		t.Errorf("%d heartbeat refusals logged, want 3 (one per sender and kind)", n)
	}
	if n := countLines(log, "refused a heartbeat of an incarnation far in the future"); n != 1 {
		t.Errorf("%d future-incarnation refusals logged, want 1", n)
	}
	if n := countLines(log, "refused a relay message that does not prove its sender"); n != 3 {
		t.Errorf("%d relay refusals logged, want 3 (one per sender and kind)", n)
	}
	if n := countLines(log, "director left"); n != 0 {
		t.Errorf("%s logged the holder as left %d times", target.host.ID, n)
	}
}
