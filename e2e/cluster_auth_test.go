//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
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
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestSyncInjection: a member with the cluster key sends connection
// records it may not send: for a VIP another director holds, for a real
// server or a VIP that is not configured. None reaches the standby's IPVS
// table; the control, a record from the VIP's holder for a configured
// real server, does (so the refusals are the checks' doing).
func TestSyncInjection(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	startCluster(t, tp, key, "", vip)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	target := tp.Director(2) // a standby: its backup daemon applies what it receives
	right, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
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
	for _, f := range forged {
		sendSync(t, tp.Client(), right, target, newSyncSender(f.sender).message(f.client, f.vip, f.rs))
	}
	control := client(40005)
	sendSync(t, tp.Client(), right, target, newSyncSender("director").message(control, vip, rs))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ipvsConns(t, target), control.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the control record, from the VIP's holder for a configured real server, was not applied within 5 s:\n%s", ipvsConns(t, target))
		}
		time.Sleep(100 * time.Millisecond)
	}
	conns := ipvsConns(t, target)
	for _, f := range forged {
		if strings.Contains(conns, f.client.String()) {
			t.Errorf("a record for %s reached the IPVS table:\n%s", f.what, conns)
		}
	}
	st := syncStats(t, target)
	t.Logf("%s: applied %d records; refused: %d not from the VIP's holder, %d not configured, %d replayed (each message was sent three times)",
		target.ID, st.AppliedRecords, st.DroppedNotHolder, st.DroppedUnconfigured, st.DroppedReplayed)
	if st.DroppedNotHolder < 2 || st.DroppedUnconfigured < 2 || st.DroppedReplayed < 2*uint64(len(forged)+1) {
		t.Errorf("refusals not counted as expected: %+v", st)
	}
}

// TestHeartbeatReplay: the standby's heartbeats from the owner are
// captured off the wire; the owner is killed (-9) and the captured
// packets are sent to the standby again, in their original rhythm, from
// the dead owner's address and port. The standby takes the VIP over within
// the failure timeout (plus the detection slack of the other cluster
// tests), as if nothing were replayed, and counts the replays as unused.
func TestHeartbeatReplay(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	ds := startCluster(t, tp, clusterKey(t), "", vip)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	owner, standby := tp.Director(1), tp.Director(2)

	c := startUDPCapture(t, standby, owner.V4, 7946)
	time.Sleep(3 * time.Second)
	captured := c.stop()
	if len(captured) < 40 { // 60 heartbeats in 3 s, and memberlist's probes
		t.Fatalf("captured %d packets from %s in 3 s", len(captured), owner.ID)
	}
	before := clusterView(t, standby).UnusedHeartbeats

	killed := time.Now()
	if err := ds[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ds[0].exited
	stopReplay := replayPackets(t, owner, netip.AddrPortFrom(owner.V4, 7946), netip.AddrPortFrom(standby.V4, 7946), captured)
	waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return slices.Contains(h, standby.ID) })
	took := time.Since(killed)
	time.Sleep(2 * time.Second) // replaying on: the dead owner must not come back
	sent := stopReplay()

	v := clusterView(t, standby)
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
	t.Logf("%s took %s over %v after the kill while %d captured packets were replayed to it; it refused %d heartbeats",
		standby.ID, vip, took.Round(time.Millisecond), sent, unused)
	if unused < 20 {
		t.Errorf("%s refused only %d heartbeats: the replay did not reach it, the test proves nothing", standby.ID, unused)
	}
	if limit := cluster.DefaultFailureTimeout + detectionWindow; took > limit {
		t.Errorf("the takeover took %v under the replay, want within %v (failure timeout and detection slack)", took, limit)
	}
}

// syncStats reads host's connection-sync counters (`lvsd status --json`).
func syncStats(t *testing.T, host *topo.Host) connsync.Stats {
	t.Helper()
	var st struct {
		ConnSync *connsync.Stats `json:"conn_sync"`
	}
	statusJSON(t, host, &st)
	if st.ConnSync == nil {
		t.Fatalf("lvsd status --json on %s has no conn_sync", host.ID)
	}
	return *st.ConnSync
}

// clusterView reads host's view of the cluster (`lvsd status --json`).
func clusterView(t *testing.T, host *topo.Host) cluster.View {
	t.Helper()
	var st struct {
		Cluster *cluster.View `json:"cluster"`
	}
	statusJSON(t, host, &st)
	if st.Cluster == nil {
		t.Fatalf("lvsd status --json on %s has no cluster", host.ID)
	}
	return *st.Cluster
}

func statusJSON(t *testing.T, host *topo.Host, v any) {
	t.Helper()
	out, code := runLVSD(t, host, "status", "--json", "--socket=/run/lvsd-e2e/"+host.Name+".sock")
	if code != 0 {
		t.Fatalf("lvsd status --json on %s: exit %d: %s", host.ID, code, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("lvsd status --json on %s: %v: %s", host.ID, err, out)
	}
}

// capturedPacket is one UDP payload and when it arrived.
type capturedPacket struct {
	at      time.Time
	payload []byte
}

// udpCapture records the payloads of the UDP datagrams from src to port
// that reach a host's Link (AF_PACKET, in-process like startCapture).
type udpCapture struct {
	fd       int
	src      netip.Addr
	port     uint16
	stopping chan struct{}
	done     chan struct{}
	got      []capturedPacket
}

func startUDPCapture(t *testing.T, host *topo.Host, src netip.Addr, port uint16) *udpCapture {
	t.Helper()
	c := &udpCapture{fd: -1, src: src, port: port, stopping: make(chan struct{}), done: make(chan struct{})}
	err := host.Do(func() error {
		ifi, err := net.InterfaceByName(host.Link)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		c.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %v: %v", host, err)
	}
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
			c.got = append(c.got, capturedPacket{time.Now(), p})
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

// stop ends the capture (idempotent) and returns what it got.
func (c *udpCapture) stop() []capturedPacket {
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
// to, over and over, keeping their original spacing, until the returned
// function is called; that returns how many were sent.
func replayPackets(t *testing.T, host *topo.Host, from, to netip.AddrPort, packets []capturedPacket) func() int {
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
		for {
			for i, p := range packets {
				if i > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(p.at.Sub(packets[i-1].at)):
					}
				}
				if _, err := conn.WriteToUDP(p.payload, dst); err == nil {
					sent++
				}
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
