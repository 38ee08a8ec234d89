package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// cutTransport is memberlist's UDP/TCP transport on loopback with a switch
// that cuts the node off, as pulling its cable would.
type cutTransport struct {
	*memberlist.NetTransport
	cut     atomic.Bool
	largest atomic.Int64 // bytes of the largest packet written
	packets chan *memberlist.Packet
	streams chan net.Conn
}

var errCut = errors.New("cable cut")

func newCutTransport(t *testing.T) *cutTransport {
	t.Helper()
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"},
		Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ct := &cutTransport{NetTransport: nt, packets: make(chan *memberlist.Packet, 1024), streams: make(chan net.Conn)}
	go func() {
		for p := range nt.PacketCh() {
			if !ct.cut.Load() {
				ct.packets <- p
			}
		}
	}()
	go func() {
		for c := range nt.StreamCh() {
			if ct.cut.Load() {
				c.Close()
				continue
			}
			ct.streams <- c
		}
	}()
	return ct
}

func (c *cutTransport) PacketCh() <-chan *memberlist.Packet { return c.packets }
func (c *cutTransport) StreamCh() <-chan net.Conn           { return c.streams }

func (c *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.cut.Load() {
		return time.Now(), nil // sent into a dead cable
	}
	for n := int64(len(b)); ; {
		if old := c.largest.Load(); n <= old || c.largest.CompareAndSwap(old, n) {
			break
		}
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return c.WriteTo(b, a.Addr)
}

func (c *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.NetTransport.DialTimeout(addr, timeout)
}

func (c *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return c.DialTimeout(a.Addr, timeout)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testNode struct {
	*Node
	tr  *cutTransport
	log *syncBuffer
}

var testKey = bytes.Repeat([]byte{7}, 32)

// startNodes starts one node per name (priorities 300, 200, 100…), each
// knowing all the others as peers, with short timers.
func startNodes(t *testing.T, rules Rules, key []byte, vips []netip.Addr, names ...string) []*testNode {
	t.Helper()
	return startNodesWith(t, func(*Config) {}, rules, key, vips, names...)
}

// startNodesWith is startNodes with each node's Config changed by tweak
// before it starts.
func startNodesWith(t *testing.T, tweak func(*Config), rules Rules, key []byte, vips []netip.Addr, names ...string) []*testNode {
	t.Helper()
	var trs []*cutTransport
	var peers []string
	for range names {
		tr := newCutTransport(t)
		trs = append(trs, tr)
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(tr.GetAutoBindPort()))
	}
	var out []*testNode
	for i, name := range names {
		buf := &syncBuffer{}
		cfg := Config{Name: name, Rules: rules, Priority: 300 - 100*i, Bind: peers[i], Peers: peers,
			Keys: [][]byte{key}, Label: "test", HeartbeatInterval: 20 * time.Millisecond, FailureTimeout: 150 * time.Millisecond,
			StartupHold: 400 * time.Millisecond, RejoinInterval: time.Second, VIPs: vips, Transport: trs[i],
			Log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		tweak(&cfg)
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tn := &testNode{Node: n, tr: trs[i], log: buf}
		out = append(out, tn)
		t.Cleanup(func() {
			_ = n.Leave(context.Background(), nil)
			if t.Failed() {
				t.Logf("log of %s:\n%s", name, buf)
			}
		})
	}
	return out
}

// waitHolders waits until exactly the named nodes hold vip.
func waitHolders(t *testing.T, nodes []*testNode, vip netip.Addr, timeout time.Duration, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var got []string
	for time.Since(start) < timeout {
		got = nil
		for _, n := range nodes {
			if n.Holds(vip) {
				got = append(got, n.cfg.Name)
			}
		}
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("after %v %s is held by %v, want %v", timeout, vip, got, want)
	return 0
}

func TestNodeFailover(t *testing.T) {
	vips := []netip.Addr{vip1}
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, vips, "a", "b", "c")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	select {
	case <-nodes[0].Changed():
	default:
		t.Error("no Changed() signal after taking the VIP")
	}
	// Quorum is a majority of 3: the cut node lets go, b takes over.
	nodes[0].tr.cut.Store(true)
	// How fast is for the VM tests to measure (e2e): a loaded host
	// running this with -race stalls for longer than the failure timeout.
	took := waitHolders(t, nodes, vip1, 5*time.Second, "b")
	t.Logf("b took over %v after the cut (failure timeout 150ms)", took)
	v, err := nodes[0].View(context.Background())
	if err != nil || v.State != "no-quorum" || v.Live != 1 {
		t.Errorf("the cut node's view: %+v, %v", v, err)
	}
	// Heal: a rises, takes the VIP back (preempt) after b let go.
	nodes[0].tr.cut.Store(false)
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	v, _ = nodes[1].View(context.Background())
	if v.Live != 3 || len(v.VIPs) != 1 || v.VIPs[0].Owner != "a" {
		t.Errorf("b's view after the heal: %+v", v)
	}
}

// A leaving node hands over at once, without waiting for the failure
// timeout, and only after its address is gone.
func TestNodeLeave(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	nodes[0].AddressChanged(vip1, true)
	released := make(chan time.Time, 1)
	go func() {
		err := nodes[0].Leave(context.Background(), func(context.Context) error {
			time.Sleep(300 * time.Millisecond) // a slow delete: b must not take over before it ends
			if nodes[1].Holds(vip1) {
				t.Error("b took the VIP while a's address was still there")
			}
			nodes[0].AddressChanged(vip1, false)
			released <- time.Now()
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}()
	at := <-released
	waitHolders(t, nodes[1:], vip1, 2*time.Second, "b")
	t.Logf("b holds the VIP %v after a's address went", time.Since(at))
}

func TestNodeActiveActiveQuorum(t *testing.T) {
	var vips []netip.Addr
	for i := range 6 {
		vips = append(vips, netip.AddrFrom4([4]byte{10, 0, 0, byte(60 + i)}))
	}
	nodes := startNodes(t, Rules{Mode: ActiveActive, Preempt: true}, testKey, vips, "director", "director2", "director3")
	want := Owners(Rules{Mode: ActiveActive, Preempt: true}, []Candidate{cand("director", 0, vips), cand("director2", 0, vips),
		cand("director3", 0, vips)}, vips)
	for _, v := range vips {
		waitHolders(t, nodes, v, 5*time.Second, want[v])
	}
	nodes[2].tr.cut.Store(true)
	// Cut off, director3 keeps its own VIPs a little longer but never
	// takes the others'.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		for _, v := range vips {
			if want[v] != "director3" && nodes[2].Holds(v) {
				t.Fatalf("the cut-off director3 took %s", v)
			}
		}
	}
	for _, v := range vips {
		if want[v] != "director3" {
			if !nodes[0].Holds(v) && !nodes[1].Holds(v) {
				t.Errorf("%s of a live director moved", v)
			}
			continue
		}
		o := Owners(Rules{Mode: ActiveActive, Preempt: true}, []Candidate{cand("director", 0, vips), cand("director2", 0, vips)}, []netip.Addr{v})[v]
		waitHolders(t, nodes, v, 3*time.Second, o) // director3 let go: no quorum
	}
}

// A director with another key never joins and says why.
func TestNodeWrongKey(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	peers := []string{nodes[0].Address(), nodes[1].Address()}
	buf := &syncBuffer{}
	c, err := Start(Config{Name: "c", Rules: Rules{Mode: ActiveStandby, Preempt: true, Quorum: 2}, Priority: 1000,
		Bind: "127.0.0.1:0", Peers: peers, Keys: [][]byte{bytes.Repeat([]byte{8}, 32)}, Label: "test",
		HeartbeatInterval: 20 * time.Millisecond, FailureTimeout: 150 * time.Millisecond, StartupHold: 400 * time.Millisecond,
		VIPs: []netip.Addr{vip1}, Log: slog.New(slog.NewTextHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Leave(context.Background(), nil)
	time.Sleep(time.Second)
	if c.Holds(vip1) || !nodes[0].Holds(vip1) {
		t.Errorf("the VIP moved: a %v, c %v", nodes[0].Holds(vip1), c.Holds(vip1))
	}
	if !strings.Contains(buf.String(), "another key") {
		t.Errorf("c's log does not say the keys differ:\n%s", buf)
	}
	if !strings.Contains(nodes[0].log.String(), "another key") {
		t.Errorf("a's log does not say a peer's key differs:\n%s", nodes[0].log)
	}
	v, _ := nodes[0].View(context.Background())
	for _, m := range v.Members {
		if m.Name == "c" {
			t.Errorf("a counts c as a member: %+v", m)
		}
	}
}

// Directors starting together never hold a VIP twice, even for a moment:
// the one that becomes ready first waits for a pending better one.
func TestNodeColdStartOneHolder(t *testing.T) {
	for _, mode := range []Mode{ActiveStandby, ActiveActive} {
		t.Run(string(mode), func(t *testing.T) {
			vips := []netip.Addr{vip1, vip2}
			nodes := startNodes(t, Rules{Mode: mode, Preempt: true}, testKey, vips, "a", "b", "c")
			// Watched for 2 s, then until every VIP has its holder (a
			// loaded host may take longer than 2 s to get there).
			start := time.Now()
			for settled := false; !settled || time.Since(start) < 2*time.Second; time.Sleep(time.Millisecond) {
				settled = true
				for _, v := range vips {
					k := 0
					for _, n := range nodes {
						if n.Holds(v) {
							k++
						}
					}
					if k > 1 {
						t.Fatalf("%s held by %d directors", v, k)
					}
					settled = settled && k == 1
				}
				if time.Since(start) > 20*time.Second {
					t.Fatal("the VIPs have no holder 20 s after start")
				}
			}
		})
	}
}

// Rotating the key in the key file, in the three documented steps, never
// splits the cluster.
func TestNodeKeyRotation(t *testing.T) {
	keyA, keyB := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	dir := t.TempDir()
	var files []string
	var nodes []*Node
	var trs []*cutTransport
	var peers []string
	for range 2 {
		tr := newCutTransport(t)
		trs = append(trs, tr)
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(tr.GetAutoBindPort()))
	}
	for i, name := range []string{"a", "b"} {
		file := filepath.Join(dir, name+".key")
		files = append(files, file)
		writeKeys(t, file, keyA)
		n, err := Start(Config{Name: name, Bind: peers[i], Peers: peers, Keys: [][]byte{keyA}, KeyFile: file,
			LoadKeys: func() ([][]byte, error) { return readKeys(file) }, HeartbeatInterval: 20 * time.Millisecond,
			FailureTimeout: 150 * time.Millisecond, Transport: trs[i], Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Leave(context.Background(), nil) })
		nodes = append(nodes, n)
	}
	waitLive := func(step string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			va, _ := nodes[0].View(context.Background())
			vb, _ := nodes[1].View(context.Background())
			if va.Live == 2 && vb.Live == 2 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: the two nodes do not hear each other", step)
	}
	waitLive("start")
	for _, step := range []struct {
		name string
		keys [][]byte
	}{{"new key second", [][]byte{keyA, keyB}}, {"new key first", [][]byte{keyB, keyA}}, {"old key gone", [][]byte{keyB}}} {
		for _, f := range files {
			writeKeys(t, f, step.keys...)
		}
		time.Sleep(1500 * time.Millisecond) // the file is checked every second
		waitLive(step.name)
	}
	if got := nodes[0].keyring.GetKeys(); len(got) != 1 || !bytes.Equal(got[0], keyB) {
		t.Errorf("keyring after the rotation: %d keys", len(got))
	}
}

// writeKeys writes a key file; its modification time moves on so the
// watcher sees the change even within one second.
func writeKeys(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Duration(len(keys)) * time.Second)
	_ = os.Chtimes(path, later, later)
}

func readKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, l := range strings.Fields(string(data)) {
		k, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
