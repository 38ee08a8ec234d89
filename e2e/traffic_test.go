//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// serveEcho starts an echo server named after each real server.
func serveEcho(t *testing.T, cfg echo.Config, hosts ...*topo.Host) map[string]*echo.Server {
	t.Helper()
	out := map[string]*echo.Server{}
	for _, h := range hosts {
		s, err := echo.Serve(context.Background(), h, h.ID, cfg)
		if err != nil {
			t.Fatalf("echo server on %v: %v", h, err)
		}
		t.Cleanup(func() { s.Close() })
		out[h.ID] = s
	}
	return out
}

// holdVIPOnLoopback does by hand what a DR real server needs (lvsd's
// realserver role will do it): the VIP on lo, and no ARP answers for it.
func holdVIPOnLoopback(t *testing.T, vip netip.Addr, hosts ...*topo.Host) {
	t.Helper()
	for _, h := range hosts {
		for _, kv := range [][2]string{
			{"net/ipv4/conf/all/arp_ignore", "1"}, {"net/ipv4/conf/all/arp_announce", "2"},
			{"net/ipv4/conf/" + h.Link + "/arp_ignore", "1"}, {"net/ipv4/conf/" + h.Link + "/arp_announce", "2"},
		} {
			if err := h.Sysctl(kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.AddAddr(netip.PrefixFrom(vip, vip.BitLen()), "lo"); err != nil {
			t.Fatal(err)
		}
	}
}

// result is one answered request: which source asked, which server answered.
type result struct {
	src   netip.Addr
	reply echo.Reply
	err   error
}

// ask sends rounds requests from every source to dst, a few sources at once,
// and returns every result.
func ask(t *testing.T, client *topo.Host, sources []netip.Addr, dst netip.AddrPort, proto string, rounds int) []result {
	t.Helper()
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for r := 0; r < rounds; r++ {
		for _, src := range sources {
			wg.Add(1)
			sem <- struct{}{}
			go func(src netip.Addr) {
				defer func() { <-sem; wg.Done() }()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				rep, err := echo.Ask(ctx, client, src, dst, proto)
				mu.Lock()
				out = append(out, result{src, rep, err})
				mu.Unlock()
			}(src)
		}
	}
	wg.Wait()
	return out
}

// distribution counts answers per server name, for failure messages and logs.
func distribution(results []result) map[string]int {
	d := map[string]int{}
	for _, r := range results {
		if r.err == nil {
			d[r.reply.Name]++
		} else {
			d["error"]++
		}
	}
	return d
}

func formatDistribution(d map[string]int) string {
	names := make([]string, 0, len(d))
	for n := range d {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteString("=")
		b.WriteString(itoa(d[n]))
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

// expectFromClient checks that every request was answered, that the server
// saw the client's own address (DR and NAT keep it), and, when local is not
// nil, that the server got it on local(reply); it fails unless every one of
// servers answered some. It returns the distribution, logged under what.
func expectFromClient(t *testing.T, what string, results []result, local func(echo.Reply) netip.AddrPort, servers ...string) map[string]int {
	t.Helper()
	dist := distribution(results)
	t.Logf("%s: %d requests: %s", what, len(results), formatDistribution(dist))
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("%s: from %s: %v", what, r.src, r.err)
		case r.reply.Peer.Addr() != r.src:
			t.Errorf("%s: %s saw peer %s, want the client's own address %s", what, r.reply.Name, r.reply.Peer, r.src)
		case local != nil && r.reply.Local != local(r.reply):
			t.Errorf("%s: %s got the request on %s, want %s", what, r.reply.Name, r.reply.Local, local(r.reply))
		}
	}
	for _, s := range servers {
		if dist[s] == 0 {
			t.Errorf("%s: answers came from %s, want all of %v", what, formatDistribution(dist), servers)
		}
	}
	return dist
}

// at returns a local-address expectation: always addr.
func at(addr netip.AddrPort) func(echo.Reply) netip.AddrPort {
	return func(echo.Reply) netip.AddrPort { return addr }
}
