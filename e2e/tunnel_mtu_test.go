//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
	"golang.org/x/sys/unix"
)

// Large transfers through an IPIP tunnel (issue 18, MTU). Every link of the
// topology has the MTU 1500; the director's encapsulation adds 20 bytes.
const (
	bulkPort  = 9000
	bulkBytes = 1 << 20 // each way, per connection
	bulkConns = 20
	maxStall  = time.Second
)

// TestTunnelLargeTransfer: 20 connections from 20 client sources each send
// 1 MiB through the VIP and read it back as the real server echoes it,
// without loss and without a stall over 1 s. What makes it work is the MSS
// clamp of lvsd's real-server role: the clients announce nothing and send
// segments of at most 1440 bytes (1500 − 20 IPIP − 40), so the director
// neither fragments (IpFragCreates) nor answers "fragmentation needed"
// (OutDestUnreachs). Subtest pmtud shows what happens without the clamp:
// the director's own behaviour (ICMP and fragments), reported, with the
// transfers only required to complete (they do while that ICMP reaches
// the clients, as it does here).
func TestTunnelLargeTransfer(t *testing.T) {
	for _, c := range []struct {
		name  string
		clamp bool
	}{{"mss-clamp", true}, {"pmtud", false}} {
		t.Run(c.name, func(t *testing.T) {
			tn := newTunnelNet(t, bulkConns, 2)
			startRealServers(t, fmt.Sprintf("  tunnel: {vips: [10.0.0.50], clamp_mss: %t}\n", c.clamp), tn.rss...)
			for _, rs := range tn.rss {
				serveBulkEcho(t, rs, bulkPort)
			}
			director := tn.tp.Director(1)
			d := newDirector(t, director, map[string]string{"web": tn.tunnelService(false, "", bulkPort)})
			d.start()
			d.waitServices(1, len(tn.rss))

			frags0 := procNetCounter(t, director, "snmp", "Ip", "FragCreates")
			icmp0 := procNetCounter(t, director, "snmp", "Icmp", "OutDestUnreachs")
			start := time.Now()
			res := bulkTransfers(t, tn.tp.Client(), tn.tp.ClientSources(false), netip.AddrPortFrom(tunnelVIP4, bulkPort))
			elapsed := time.Since(start)
			frags := procNetCounter(t, director, "snmp", "Ip", "FragCreates") - frags0
			icmp := procNetCounter(t, director, "snmp", "Icmp", "OutDestUnreachs") - icmp0

			var worst time.Duration
			mss := map[int]int{}
			retrans := 0
			for _, r := range res {
				if r.err != nil {
					t.Errorf("connection from %s: %v", r.src, r.err)
				}
				worst = max(worst, r.stall)
				mss[r.mss]++
				retrans += r.retrans
			}
			t.Logf("%d connections × %d KiB each way in %v; longest stall %v; client send MSS %v, %d segments retransmitted; director: %d fragments made, %d ICMP unreachable sent",
				len(res), bulkBytes>>10, elapsed.Round(time.Millisecond), worst.Round(time.Millisecond), mss, retrans, frags, icmp)
			if !c.clamp {
				return
			}
			for _, r := range res {
				if r.stall > maxStall {
					t.Errorf("the connection from %s stalled for %v (want ≤ %v; it retransmitted %d segments)", r.src, r.stall.Round(time.Millisecond), maxStall, r.retrans)
				}
			}
			// The clamp announces 1440; with TCP timestamps (Linux's default)
			// each segment carries 12 bytes of options, which snd_mss deducts.
			if want := 1500 - 20 - 40 - 12; len(mss) != 1 || mss[want] != len(res) {
				t.Errorf("client send MSS %v, want %d on every connection (the real servers' clamp of 1440, less timestamps)", mss, want)
			}
			if frags > 0 || icmp > 0 {
				t.Errorf("the director made %d fragments and sent %d ICMP unreachable: the clamp should leave it nothing to do", frags, icmp)
			}
		})
	}
}

// serveBulkEcho echoes every connection on port back as it reads it.
func serveBulkEcho(t *testing.T, h *topo.Host, port int) {
	t.Helper()
	ln, err := h.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
}

// bulkResult is one connection of bulkTransfers.
type bulkResult struct {
	src     netip.Addr
	mss     int           // the client's send MSS (TCP_INFO), options such as timestamps deducted
	retrans int           // segments the client retransmitted (TCP_INFO)
	stall   time.Duration // the longest wait for echoed data
	err     error
}

// bulkTransfers runs one connection per source at once: each writes
// bulkBytes of a pattern while it reads the echo back and checks it.
func bulkTransfers(t *testing.T, client *topo.Host, sources []netip.Addr, dst netip.AddrPort) []bulkResult {
	t.Helper()
	pattern := make([]byte, bulkBytes)
	for i := range pattern {
		pattern[i] = byte(i * 7)
	}
	out := make([]bulkResult, len(sources))
	var wg sync.WaitGroup
	for i, src := range sources {
		wg.Go(func() { out[i] = bulkOne(client, src, dst, pattern) })
	}
	wg.Wait()
	return out
}

func bulkOne(client *topo.Host, src netip.Addr, dst netip.AddrPort, pattern []byte) bulkResult {
	r := bulkResult{src: src}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "tcp", src, dst)
	if err != nil {
		r.err = err
		return r
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(90 * time.Second))
	r.mss, _ = tcpInfo(c)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(pattern)
		werr <- err
	}()
	got := make([]byte, 0, len(pattern))
	buf := make([]byte, 64<<10)
	last := time.Now()
	for len(got) < len(pattern) {
		n, err := c.Read(buf)
		if n > 0 {
			r.stall = max(r.stall, time.Since(last))
			last = time.Now()
			got = append(got, buf[:n]...)
		}
		if err != nil {
			r.err = fmt.Errorf("after %d of %d bytes back: %w", len(got), len(pattern), err)
			return r
		}
	}
	_, r.retrans = tcpInfo(c)
	if err := <-werr; err != nil {
		r.err = fmt.Errorf("writing: %w", err)
	} else if !bytes.Equal(got, pattern) {
		r.err = errors.New("the echo differs from what was sent")
	}
	return r
}

// tcpInfo returns the MSS the kernel sends with on c (TCP_INFO snd_mss)
// and how many segments it retransmitted.
func tcpInfo(c net.Conn) (mss, retrans int) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, 0
	}
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			mss, retrans = int(info.Snd_mss), int(info.Total_retrans)
		}
	})
	return mss, retrans
}
