//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/cluster/identity"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestSyncInjection: a member with the cluster key sends connection
// records it may not send: for a VIP another director holds, for a real
// server or a VIP that is not configured. None reaches the standby's IPVS
// table. Without identities the control, a record naming the VIP's holder
// for a configured real server, is applied (so the refusals are the
// checks' doing): anyone with the key may name the holder. With identities
// (cluster.directors) that same unsigned control is refused, and only the
// record signed with the holder's own key is applied; the forged ones are
// signed with their sender's key where it has one, so the holder and
// configuration checks still refuse what a real director may not send.
func TestSyncInjection(t *testing.T) {
	for _, identities := range []bool{false, true} {
		name := "shared key only"
		if identities {
			name = "identities"
		}
		t.Run(name, func(t *testing.T) { syncInjection(t, identities) })
	}
}

func syncInjection(t *testing.T, identities bool) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp, right, keys := syncClusterWith(t, vip, identities)
	target := tp.Director(2) // a standby: its backup daemon applies what it receives
	client := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("10.0.0.200"), port) }
	rs := tp.RS(1).V4
	forged := []struct {
		what, sender string
		client       netip.AddrPort
		vip, rs      netip.Addr
	}{
		{"a VIP the sender does not hold", "director3", client(40001), vip, rs},
		{"a sender that is no director", "intruder", client(40002), vip, rs},
		{"a real server not configured (the client's own address)", "director", client(40003), vip, tp.Client().V4},
		{"a VIP not configured", "director", client(40004), netip.MustParseAddr("10.0.0.99"), rs},
	}
	intruderKey, err := identity.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forged {
		msg := newSyncSender(f.sender).message(f.client, f.vip, f.rs)
		if identities {
			key := keys[f.sender]
			if key == nil {
				key = intruderKey
			}
			msg = newSyncSender(f.sender).signedMessage(f.client, f.vip, f.rs, key)
		}
		sendSync(t, tp.Client(), right, target, msg)
	}
	control := client(40005)
	sendSync(t, tp.Client(), right, target, newSyncSender("director").message(control, vip, rs))
	if identities {
		signed := client(40006)
		sendSync(t, tp.Client(), right, target, newSyncSender("director").signedMessage(signed, vip, rs, keys["director"]))
		waitConn(t, target, signed, "the record signed with the VIP's holder's key, for a configured real server,")
		forged = append(forged, struct {
			what, sender string
			client       netip.AddrPort
			vip, rs      netip.Addr
		}{"the holder's name without its signature", "director", control, vip, rs})
	} else {
		waitConn(t, target, control, "the control record, from the VIP's holder for a configured real server,")
	}
	conns := ipvsConns(t, target)
	for _, f := range forged {
		if strings.Contains(conns, f.client.String()) {
			t.Errorf("a record for %s reached the IPVS table:\n%s", f.what, conns)
		}
	}
	st := statusPart[connsync.Stats](t, target, "conn_sync")
	t.Logf("%s: applied %d records; refused: %d not from the VIP's holder, %d not configured, %d replayed, %d unproven (each message was sent three times)",
		target.ID, st.AppliedRecords, st.DroppedNotHolder, st.DroppedUnconfigured, st.DroppedReplayed, st.DroppedUnproven)
	wantNotHolder, wantReplayed, wantUnproven := uint64(2), 2*uint64(len(forged)+1), uint64(0)
	if identities {
		// The intruder's and the unsigned control's three copies each are
		// refused before the freshness check; director3's is not the holder.
		wantNotHolder, wantReplayed, wantUnproven = 1, 2*uint64(len(forged)-1), 6
	}
	if st.DroppedNotHolder < wantNotHolder || st.DroppedUnconfigured < 2 || st.DroppedReplayed < wantReplayed || st.DroppedUnproven < wantUnproven {
		t.Errorf("refusals not counted as expected: %+v", st)
	}
}

// TestHeartbeatReplay: the owner's packets to the standby (heartbeats and
// memberlist's own) are captured off the wire; they are sent to the
// standby again, over and over, one every 10 ms (twice the heartbeat rate:
// no gap gives the failure away) from the owner's address, from a second
// before the owner is killed (-9) on. The standby takes the VIP over within
// the failure timeout (plus the detection slack of the other cluster
// tests), as if nothing were replayed, keeps it while the replay goes on,
// and counts the replayed heartbeats as unused. (The previous lvsd, which
// let any authentic heartbeat refresh liveness, took the VIP over and gave
// it back to the dead owner again and again.)
func TestHeartbeatReplay(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	ds := startCluster(t, tp, clusterKey(t), "", vip)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	owner, standby := tp.Director(1), tp.Director(2)

	c := startUDPCapture(t, standby, owner.V4, 7946)
	time.Sleep(3 * time.Second)
	captured := c.stop()
	if len(captured) < 30 { // 60 heartbeats in 3 s, and memberlist's probes
		t.Fatalf("captured %d packets from %s in 3 s", len(captured), owner.ID)
	}
	before := statusPart[cluster.View](t, standby, "cluster").UnusedHeartbeats

	// From the owner's address (another port: the owner still has 7946),
	// already before the kill.
	stopReplay := replayPackets(t, owner, netip.AddrPortFrom(owner.V4, 0), netip.AddrPortFrom(standby.V4, 7946), captured, 10*time.Millisecond)
	time.Sleep(time.Second)
	tl := startTimeline(t, tp, []netip.Addr{vip})
	killed := time.Now()
	if err := ds[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ds[0].exited
	waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return slices.Contains(h, standby.ID) })
	took := time.Since(killed)
	time.Sleep(3 * time.Second) // replaying on: the dead owner must not come back
	v := statusPart[cluster.View](t, standby, "cluster")
	sent := stopReplay()
	tl.close()
	taken := tl.firstAfter(vip, killed, func(h []string) bool { return slices.Contains(h, standby.ID) })
	if !taken.IsZero() && !tl.firstAfter(vip, taken, func(h []string) bool { return !slices.Contains(h, standby.ID) }).IsZero() {
		t.Errorf("%s let the VIP go again while the replay went on:\n%s", standby.ID, tl)
	}
	for _, m := range v.Members {
		if m.Name == owner.ID && m.Live {
			t.Errorf("%s counts the dead %s live after %d replayed packets", standby.ID, owner.ID, sent)
		}
	}
	for _, vv := range v.VIPs {
		if vv.VIP == vip.String() && vv.Owner != standby.ID {
			t.Errorf("%s's view: %s owned by %q while the replay goes on, want %s", standby.ID, vip, vv.Owner, standby.ID)
		}
	}
	unused := v.UnusedHeartbeats - before
	t.Logf("%s took %s over %v after the kill while %d packets (of %d captured in 3 s) were replayed to it; it refused %d heartbeats",
		standby.ID, vip, took.Round(time.Millisecond), sent, len(captured), unused)
	t.Logf("timeline:\n%s", tl)
	if unused < 100 {
		t.Errorf("%s refused only %d heartbeats: the replay did not reach it, the test proves nothing", standby.ID, unused)
	}
	if limit := cluster.DefaultFailureTimeout + detectionWindow; took > limit {
		t.Errorf("the takeover took %v under the replay, want within %v (failure timeout and detection slack)", took, limit)
	}
}

// statusPart reads one part of host's `lvsd status --json`: conn_sync,
// cluster, ….
func statusPart[T any](t *testing.T, host *topo.Host, part string) T {
	t.Helper()
	out, code := runLVSD(t, host, "status", "--json", "--socket=/run/lvsd-e2e/"+host.Name+".sock")
	if code != 0 {
		t.Fatalf("lvsd status --json on %s: exit %d: %s", host.ID, code, out)
	}
	var parts map[string]json.RawMessage
	var v T
	if err := json.Unmarshal([]byte(out), &parts); err != nil || parts[part] == nil {
		t.Fatalf("lvsd status --json on %s: no %s (%v): %s", host.ID, part, err, out)
	}
	if err := json.Unmarshal(parts[part], &v); err != nil {
		t.Fatalf("lvsd status --json on %s: %s: %v", host.ID, part, err)
	}
	return v
}

// udpCapture records the payloads of the UDP datagrams from src to port
// that reach a host's Link (AF_PACKET, in-process like startCapture).
type udpCapture struct {
	fd       int
	src      netip.Addr
	port     uint16
	stopping chan struct{}
	done     chan struct{}
	got      [][]byte
}

func startUDPCapture(t *testing.T, host *topo.Host, src netip.Addr, port uint16) *udpCapture {
	t.Helper()
	c := &udpCapture{fd: packetSocket(t, host, host.Link, unix.SOCK_DGRAM, unix.ETH_P_IP), src: src, port: port,
		stopping: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *udpCapture) loop() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.stopping:
			return
		default:
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if p, ok := c.match(buf[:n]); ok {
			c.got = append(c.got, p)
		}
	}
}

// match returns the UDP payload of an IPv4 packet from c.src to c.port.
func (c *udpCapture) match(b []byte) ([]byte, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != unix.IPPROTO_UDP {
		return nil, false
	}
	ihl := int(b[0]&0x0f) * 4
	if len(b) < ihl+8 || netip.AddrFrom4([4]byte(b[12:16])) != c.src || binary.BigEndian.Uint16(b[ihl+2:]) != c.port {
		return nil, false
	}
	return append([]byte(nil), b[ihl+8:]...), true
}

// stop ends the capture (idempotent) and returns the payloads it got.
func (c *udpCapture) stop() [][]byte {
	select {
	case <-c.stopping:
	default:
		close(c.stopping)
		<-c.done
		unix.Close(c.fd)
	}
	return c.got
}

// replayPackets sends packets from from (a socket in host's namespace) to
// to, one every period, over and over, until the returned function is
// called; that returns how many were sent.
func replayPackets(t *testing.T, host *topo.Host, from, to netip.AddrPort, packets [][]byte, period time.Duration) func() int {
	t.Helper()
	var conn *net.UDPConn
	if err := host.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(from))
		return err
	}); err != nil {
		t.Fatalf("replaying from %s: %v", from, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sent := 0
	wg.Go(func() {
		dst := net.UDPAddrFromAddrPort(to)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(packets) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := conn.WriteToUDP(packets[i], dst); err == nil {
				sent++
			}
		}
	})
	stop := func() int {
		cancel()
		wg.Wait()
		conn.Close()
		return sent
	}
	t.Cleanup(func() { stop() })
	return stop
}
