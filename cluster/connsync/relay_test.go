package connsync

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	tr := &fakeTransport{}
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"defaults", Config{Transport: tr}, ""},
		{"no transport", Config{}, "no transport"},
		{"ipv6 group", Config{Transport: tr, Group: netip.MustParseAddr("ff02::81")}, "not an IPv4 multicast"},
		{"unicast group", Config{Transport: tr, Group: netip.MustParseAddr("10.0.0.1")}, "not an IPv4 multicast"},
		{"same ports", Config{Transport: tr, MasterPort: 9000, BackupPort: 9000}, "both 9000"},
		{"same default port", Config{Transport: tr, BackupPort: 8848}, "both 8848"},
		{"negative interval", Config{Transport: tr, ResyncInterval: -1}, "negative"},
		{"negative rate", Config{Transport: tr, MaxRate: -1}, "negative"},
		{"ipv6 pusher", Config{Transport: tr, Pusher: netip.MustParseAddrPort("[::1]:8850")}, "not an IPv4 address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				c := r.cfg
				if c.Interface != "lo" || c.Group != DefaultGroup || c.MasterPort != 8848 || c.BackupPort != 8849 ||
					c.ResyncInterval != 10*time.Second || c.MaxEntries != 1<<20 {
					t.Fatalf("defaults %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// node is a Relay with fake sockets, running until the test ends.
type node struct {
	*Relay
	socks  *fakeSockets
	tr     *fakeTransport
	pushes chan netip.AddrPort // what the relay pushed to
}

func startNode(t *testing.T, name string, cfg Config) *node {
	t.Helper()
	return startNodeWith(t, name, cfg, func(*fakeSockets) {})
}

// startNodeWith is startNode with the sockets set up by setup first.
func startNodeWith(t *testing.T, name string, cfg Config, setup func(*fakeSockets)) *node {
	t.Helper()
	n := &node{socks: newFakeSockets(), tr: &fakeTransport{name: name, peers: map[string]*Relay{}},
		pushes: make(chan netip.AddrPort, 100)}
	setup(n.socks)
	cfg.Transport = n.tr
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.open = n.socks.open
	r.push = func(to netip.AddrPort) error { n.pushes <- to; return nil }
	r.SetServices(testServices())
	n.Relay = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", name, err)
		}
	})
	return n
}

// connect makes a and b peers, as the cluster does when they meet.
func connect(a, b *node) {
	a.tr.mu.Lock()
	a.tr.peers[b.tr.name] = b.Relay
	a.tr.mu.Unlock()
	b.tr.mu.Lock()
	b.tr.peers[a.tr.name] = a.Relay
	b.tr.mu.Unlock()
}

// TestRelayEndToEnd runs two relays: what a's master sends reaches b's
// backup daemon, promptly and again when b joins anew.
func TestRelayEndToEnd(t *testing.T) {
	a := startNode(t, "a", Config{SyncID: 1})
	b := startNode(t, "b", Config{SyncID: 2})
	connect(a, b)

	v4, v6 := tcp4("198.51.100.7", 40000), tcp6("2001:db8::7", 40001)
	v4.seq = true
	a.socks.master <- datagram(1, v4.encode(), v6.encode())
	got := b.socks.waitWritten(t, 1)
	if want := datagram(2, v4.encode(), v6.encode()); !bytes.Equal(got[0], want) {
		t.Fatalf("b's backup got\n% x\nwant\n% x", got[0], want)
	}

	// b restarted: a replays its cache to b alone.
	a.MemberJoined("b")
	got = b.socks.waitWritten(t, 2)
	if _, recs, err := parseDatagram(got[1]); err != nil || len(recs) != 2 || got[1][1] != 2 {
		t.Fatalf("replayed datagram: %d records, err %v", len(recs), err)
	}
	for _, m := range a.tr.messages()[1:] {
		if m.to != "b" {
			t.Fatalf("replay went to %q", m.to)
		}
	}

	waitFor(t, func() bool {
		sa, sb := a.Stats(), b.Stats()
		return sa.MasterRecords == 2 && sa.SentRecords == 4 && sa.ReplayedRecords == 2 && sa.CacheSize == 2 &&
			sb.ReceivedRecords == 4 && sb.AppliedRecords == 4 && sb.AppliedDatagrams == 2 && sb.CacheSize == 0
	})
}

// TestRelayAuthorises: the receiving relay asks its transport (the cluster
// node) who holds the VIP and applies only configured services.
func TestRelayAuthorises(t *testing.T) {
	a := startNode(t, "a", Config{})
	b := startNode(t, "b", Config{})
	connect(a, b)
	var aHolds atomic.Bool
	b.tr.holds = func(sender string, vip netip.Addr) bool { return sender == "a" && aHolds.Load() }
	stranger := tcp4("198.51.100.8", 40000)
	stranger.daddr = netip.MustParseAddr("203.0.113.66")
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode(), stranger.encode())
	waitFor(t, func() bool { s := b.Stats(); return s.DroppedNotHolder == 1 && s.DroppedUnconfigured == 1 })
	aHolds.Store(true)
	a.MemberJoined("b") // a replays its cache
	got := b.socks.waitWritten(t, 1)
	if want := datagram(0, tcp4("198.51.100.7", 40000).encode()); len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("b's backup got\n% x\nwant\n% x", got, want)
	}
	waitFor(t, func() bool { s := b.Stats(); return s.DroppedUnconfigured == 2 && s.AppliedRecords == 1 })
}

// TestRelayPeriodicResync: with no new input, the cache goes to everyone
// each FullResyncInterval, the safety net.
func TestRelayPeriodicResync(t *testing.T) {
	a := startNode(t, "a", Config{FullResyncInterval: 20 * time.Millisecond})
	b := startNode(t, "b", Config{})
	connect(a, b)
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode())
	b.socks.waitWritten(t, 3)
	// a counts a replay after handing it to the transport, which has
	// delivered it by then: b may have written it before a counted it.
	waitFor(t, func() bool { return a.Stats().ReplayedRecords >= 2 })
}

// TestRelayLostMessageResent: a's first broadcast and then its last are
// lost on the way to b; b finds both (a gap, then a summary) and a sends
// them again, without replaying its cache.
func TestRelayLostMessageResent(t *testing.T) {
	a := startNode(t, "a", Config{ResyncInterval: 50 * time.Millisecond})
	b := startNode(t, "b", Config{})
	connect(a, b)
	a.MemberJoined("b")
	b.MemberJoined("a")
	waitFor(t, func() bool { return b.CaughtUp() })
	a.tr.lose = func(to string, msg []byte) bool {
		m, err := decodeMessage(msg)
		return err == nil && m.flags == 0 && (m.stream == 1 || m.stream == 3)
	}
	for i := range 3 {
		a.socks.master <- datagram(1, tcp4("198.51.100.7", uint16(40000+i)).encode())
		waitFor(t, func() bool { return a.Stats().SentMessages >= uint64(i+1) })
	}
	waitFor(t, func() bool { return b.Stats().AppliedRecords == 3 })
	sa, sb := a.Stats(), b.Stats()
	if sa.ResentRecords != 2 || sa.FallbackReplays != 0 || sb.MissingMessages != 2 || sa.ReplayedRecords != 2 {
		t.Fatalf("a %+v\nb %+v", sa, sb)
	}
}

func TestRelayReleaseVIP(t *testing.T) {
	a := startNode(t, "a", Config{})
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode())
	waitFor(t, func() bool { return a.Stats().CacheSize == 1 })
	a.ReleaseVIP(netip.MustParseAddr("192.0.2.10"))
	waitFor(t, func() bool { return a.Stats().CacheSize == 0 })
}

func TestRelayForgetDestinations(t *testing.T) {
	a := startNode(t, "a", Config{})
	other := tcp4("198.51.100.8", 40000)
	other.daddr = netip.MustParseAddr("10.0.0.6")
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode(), other.encode())
	waitFor(t, func() bool { return a.Stats().CacheSize == 2 })
	// No destinations: nothing to forget (not the whole VIP).
	a.ForgetDestinations(netip.MustParseAddr("192.0.2.10"), nil)
	a.ForgetDestinations(netip.MustParseAddr("192.0.2.10"), []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:80")})
	waitFor(t, func() bool { return a.Stats().CacheSize == 1 })
}

// TestRelayPusher: a datagram with records to relay arms the push; the
// datagram the push caused does not arm it again; records of the pusher
// service are neither cached nor relayed.
func TestRelayPusher(t *testing.T) {
	pusher := netip.MustParseAddrPort("127.0.0.1:8850")
	a := startNode(t, "a", Config{Pusher: pusher, PushDelay: time.Millisecond})
	b := startNode(t, "b", Config{})
	connect(a, b)
	dummy := tcp4("127.0.0.1", 40001)
	dummy.proto, dummy.state, dummy.timeout = protoUDP, 0, 300
	dummy.vaddr, dummy.vport, dummy.daddr, dummy.dport = pusher.Addr(), pusher.Port(), pusher.Addr(), pusher.Port()
	// A push that should come may be late on a loaded host (5 s); one
	// that should not is watched for 100 ms (and counted at the end).
	expectPush := func(want bool) {
		t.Helper()
		wait := 100 * time.Millisecond
		if want {
			wait = 5 * time.Second
		}
		select {
		case to := <-a.pushes:
			if !want || to != pusher {
				t.Fatalf("pushed to %s (want a push: %v)", to, want)
			}
		case <-time.After(wait):
			if want {
				t.Fatal("no push after a datagram with a record to relay")
			}
		}
	}
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode())
	expectPush(true)
	// What the push caused: the pusher's dummy pushed out the next record.
	a.socks.master <- datagram(1, tcp4("198.51.100.8", 40000).encode())
	expectPush(false)
	// The dummy itself, pushed out soon after by a real record, which is
	// alone now: push again.
	a.socks.master <- datagram(1, dummy.encode())
	expectPush(true)
	a.socks.master <- datagram(1, tcp4("198.51.100.9", 40000).encode(), dummy.encode()) // caused by the push
	expectPush(false)
	waitFor(t, func() bool { return b.Stats().AppliedRecords == 3 })
	// a counts what it sent after the transport delivered it to b.
	waitFor(t, func() bool { return a.Stats().SentRecords >= 3 })
	if s := a.Stats(); s.CacheSize != 3 || s.Pushes != 2 || s.SentRecords != 3 {
		t.Fatalf("stats %+v: want 3 cached and relayed (the dummies neither), 2 pushes", s)
	}
}

// TestDeliverOverflow: Deliver never blocks; what does not fit is counted.
func TestDeliverOverflow(t *testing.T) {
	r, err := New(Config{Transport: &fakeTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	msg := peerB().message(0, t0, tcp4("198.51.100.1", 1).encode())
	for range deliveryQueue + 5 { // Run is not running: nothing drains
		r.Deliver(msg)
	}
	r.Deliver(make([]byte, maxMessageLen+1))
	if s := r.Stats(); s.DroppedOverflow != 5 || s.DroppedInvalid != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRunTwice(t *testing.T) {
	a := startNode(t, "a", Config{})
	waitFor(t, func() bool { return a.running.Load() })
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
}

// TestStatsConcurrent exercises Stats, Deliver and the hints from other
// goroutines while Run works (meant for -race).
func TestStatsConcurrent(t *testing.T) {
	a := startNode(t, "a", Config{ResyncInterval: time.Millisecond, FullResyncInterval: time.Millisecond})
	b := startNode(t, "b", Config{})
	connect(a, b)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				a.socks.master <- datagram(1, tcp4("198.51.100.7", uint16(i*100+j)).encode())
				a.MemberJoined("b")
				_ = a.Stats()
				_ = b.Stats()
			}
		})
	}
	wg.Wait()
	waitFor(t, func() bool { return a.Stats().MasterRecords == 200 && b.Stats().AppliedRecords >= 200 })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
	}
}
