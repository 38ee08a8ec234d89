//go:build e2e

package e2e

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestSyncAuth: connection-sync messages reach a director's IPVS table only
// through the cluster's encryption. A forged message sent to director's
// cluster port with another key is never applied; the same message sealed
// with the cluster's key, naming the VIP's holder as its sender, is (the
// control: the path works, so the refusal is the key's doing).
func TestSyncAuth(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp, right := syncCluster(t, vip)
	target := tp.Director(2) // a standby: its backup daemon applies what it receives

	wrong := make([]byte, 32)
	wrong[0] = 1
	forged := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.200"), 40001)
	holder := newSyncSender("director")
	sendSync(t, tp.Client(), wrong, target, holder.message(forged, vip, tp.RS(1).V4))
	time.Sleep(2 * time.Second)
	if conns := ipvsConns(t, target); strings.Contains(conns, forged.String()) {
		t.Fatalf("a sync message sealed with another key was applied:\n%s", conns)
	}

	sealed := netip.AddrPortFrom(forged.Addr(), 40002)
	sendSync(t, tp.Client(), right, target, holder.message(sealed, vip, tp.RS(1).V4))
	waitConn(t, target, sealed, "the control message, sealed with the cluster key")
	if conns := ipvsConns(t, target); strings.Contains(conns, forged.String()) {
		t.Errorf("the forged connection appeared after all:\n%s", conns)
	}
	t.Logf("%s applied the message sealed with the cluster key, not the one with another key:\n%s", target.ID, ipvsConns(t, target))

	// On the director itself only root may feed the daemons: a datagram
	// from another user to the backup daemon's port on lo is dropped.
	checkSyncGuard(t, target)
}

// checkSyncGuard listens where the backup daemon listens (224.0.0.81:8849
// on lo, next to it) and has this test binary send a datagram there, once
// as root (it arrives: the control) and once as nobody (lvsd's output rule
// drops it).
func checkSyncGuard(t *testing.T, h *topo.Host) {
	t.Helper()
	var ln *net.UDPConn
	if err := h.Do(func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		ln, err = net.ListenMulticastUDP("udp4", lo, &net.UDPAddr{IP: net.IPv4(224, 0, 0, 81), Port: 8849})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A copy nobody may execute (go test's build directory is root's).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "probe")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	received := func(as ...string) bool {
		t.Helper()
		cmd := h.Exec(t.Context(), as[0], append(as[1:], bin)...)
		payload := syncProbe + " " + as[0] // a copy of an earlier probe may still be queued
		cmd.Env = append(os.Environ(), syncProbeEnv+"="+payload)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd.Args, err, out)
		}
		ln.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 64)
		for {
			n, _, err := ln.ReadFromUDP(buf)
			if err != nil {
				return false
			}
			if string(buf[:n]) == payload {
				return true
			}
		}
	}
	if !received("env") {
		t.Fatal("a datagram from root to 224.0.0.81:8849 on lo did not arrive (the control)")
	}
	if received("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") {
		t.Errorf("a datagram from user nobody reached the sync daemons' port on lo:\n%s", run(t, h, "nft", "list", "table", "ip", "lvsd"))
	}
}

const (
	syncProbeEnv = "LVSD_E2E_SYNC_PROBE"
	syncProbe    = "guard-probe"
)

// sendSyncProbe sends the probe text of its environment to 224.0.0.81:8849 out of lo, as the relay
// sends to the backup daemon; it runs in a re-executed test binary.
func sendSyncProbe() int {
	lo, err := net.InterfaceByName("lo")
	if err == nil {
		var c *net.UDPConn
		// Unconnected: without IP_MULTICAST_IF there is no route to connect.
		if c, err = net.ListenUDP("udp4", nil); err == nil {
			defer c.Close()
			var raw syscall.RawConn
			if raw, err = c.SyscallConn(); err == nil {
				cerr := raw.Control(func(fd uintptr) {
					err = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(lo.Index)})
				})
				if err == nil && cerr == nil {
					_, err = c.WriteToUDP([]byte(os.Getenv(syncProbeEnv)), &net.UDPAddr{IP: net.IPv4(224, 0, 0, 81), Port: 8849})
				}
			}
		}
	}
	if err != nil && !errors.Is(err, syscall.EPERM) { // EPERM: the output rule dropped it
		fmt.Fprintln(os.Stderr, "sync probe:", err)
		return 1
	}
	return 0
}

// syncCluster starts three directors serving vip, waits until the first
// holds it and returns the topology and the cluster key.
func syncCluster(t *testing.T, vip netip.Addr) (*topo.Topology, []byte) {
	t.Helper()
	tp, key, _ := syncClusterWith(t, vip, false)
	return tp, key
}

// syncClusterWith is syncCluster, with identities (cluster.directors) when
// asked: then it also returns the directors' private keys by ID.
func syncClusterWith(t *testing.T, vip netip.Addr, identities bool) (*topo.Topology, []byte, map[string]ed25519.PrivateKey) {
	t.Helper()
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	var keys map[string]ed25519.PrivateKey
	if identities {
		_, keys = identityCluster(t, tp, key, "", vip)
	} else {
		startCluster(t, tp, key, "", vip)
	}
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	// A director that held the VIP for a moment while the cluster formed
	// may send its records for 3 s after letting it go (the cluster's
	// release grace): wait that out, then check nobody else took it.
	time.Sleep(3500 * time.Millisecond)
	waitHolders(t, tp, vip, time.Second, onlyOn("director"))
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tp, raw, keys
}

// waitConn waits up to 5 s until host's IPVS table has a connection from
// client, which what sent.
func waitConn(t *testing.T, host *topo.Host, client netip.AddrPort, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ipvsConns(t, host), client.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s was not applied within 5 s:\n%s", what, ipvsConns(t, host))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ipvsConns lists host's IPVS connection entries.
func ipvsConns(t *testing.T, host *topo.Host) string {
	t.Helper()
	return run(t, host, "ipvsadm", "-Lnc")
}

// sendSync sends msg as a memberlist user message to director's cluster
// port from a memberlist of its own in from's namespace, sealed with key
// and the default label, as a director would.
func sendSync(t *testing.T, from *topo.Host, key []byte, to *topo.Host, msg []byte) {
	t.Helper()
	c := memberlist.DefaultLANConfig()
	c.Name = "intruder"
	c.BindAddr, c.BindPort, c.AdvertisePort = from.V4.String(), 0, 0
	c.Label = "lvsd"
	c.Logger = log.New(io.Discard, "", 0)
	kr, err := memberlist.NewKeyring([][]byte{key}, key)
	if err != nil {
		t.Fatal(err)
	}
	c.Keyring = kr
	var ml *memberlist.Memberlist
	if err := from.Do(func() (err error) { ml, err = memberlist.Create(c); return err }); err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	addr := memberlist.Address{Addr: fmt.Sprintf("%s:7946", to.V4)}
	for range 3 { // UDP: send a few times
		if err := ml.SendToAddress(addr, msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncSender seals relay messages (cluster/connsync/message.go) as the
// relay of director name would: numbered from 1, sent now.
type syncSender struct {
	name             string
	incarnation, seq uint64
}

func newSyncSender(name string) *syncSender {
	return &syncSender{name: name, incarnation: uint64(time.Now().UnixNano())}
}

// message carries one kernel sync record (ip_vs_sync.c, protocol v1): an
// ESTABLISHED DR connection client → vip:80 → rs:80 with 900 s to live.
func (s *syncSender) message(client netip.AddrPort, vip, rs netip.Addr) []byte {
	s.seq++
	m := []byte{'S', 3, 0, 1}
	m = binary.BigEndian.AppendUint64(m, uint64(time.Now().UnixNano()))
	m = binary.BigEndian.AppendUint64(m, s.incarnation)
	m = binary.BigEndian.AppendUint64(m, s.seq)
	m = binary.BigEndian.AppendUint64(m, s.seq) // stream number: every message is a fresh broadcast
	m = append(m, byte(len(s.name)))
	m = append(m, s.name...)
	for len(m)%4 != 0 {
		m = append(m, 0)
	}
	m = append(m, 0, 6)                          // type IPv4, protocol TCP
	m = binary.BigEndian.AppendUint16(m, 36)     // version 0, size 36
	m = binary.BigEndian.AppendUint32(m, 0x0003) // IP_VS_CONN_F_DROUTE
	m = binary.BigEndian.AppendUint16(m, 1)      // IP_VS_TCP_S_ESTABLISHED
	m = binary.BigEndian.AppendUint16(m, client.Port())
	m = binary.BigEndian.AppendUint16(m, 80) // vport
	m = binary.BigEndian.AppendUint16(m, 80) // dport
	m = binary.BigEndian.AppendUint32(m, 0)  // fwmark
	m = binary.BigEndian.AppendUint32(m, 900)
	m = append(m, client.Addr().AsSlice()...)
	m = append(m, vip.AsSlice()...)
	return append(m, rs.AsSlice()...)
}
