package health

import (
	"context"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
)

// The ICMP tests need CAP_NET_RAW (or a permissive ping_group_range); CI
// runs as root, so they must not be skipped there.
func requireICMP(t *testing.T) {
	if os.Geteuid() != 0 {
		if p, err := openPinger(false); err != nil {
			t.Skipf("no ICMP socket without root: %v", err)
		} else {
			p.close()
		}
	}
}

func TestICMP(t *testing.T) {
	requireICMP(t)
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			res, _ := probe(t, hostPort(ip, 0), Check{Type: "icmp"})
			wantResult(t, res, true, "")
		})
	}
	// TEST-NET-2 is reserved for documentation and never routed, so
	// nothing answers: the probe times out. (TEST-NET-1 is not used: it
	// is some test machines' own network.)
	res, _ := probe(t, "198.51.100.1:0", Check{Type: "icmp", Timeout: 200 * time.Millisecond})
	if res.OK {
		t.Skip("198.51.100.1 answers pings on this network")
	}
	wantResult(t, res, false, "echo: timed out")
}

func TestICMPConcurrentShareOneSocket(t *testing.T) {
	requireICMP(t)
	ps := &pingers{}
	defer ps.close()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		// Each loopback address answers from itself, so replies must be
		// matched by sequence number and source.
		dst := netip.AddrFrom4([4]byte{127, 0, byte(i / 250), byte(1 + i%250)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := ps.ping(ctx, dst); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ps.v4 == nil || ps.v6 != nil {
		t.Errorf("pingers %+v: want one IPv4 socket", ps)
	}
	if n := len(ps.v4.wait); n != 0 {
		t.Errorf("%d probes still registered", n)
	}
}

func TestICMPAfterClose(t *testing.T) {
	ps := &pingers{}
	ps.close()
	if err := ps.ping(context.Background(), netip.MustParseAddr("127.0.0.1")); err != errStopped {
		t.Errorf("ping after close: %v", err)
	}
}
