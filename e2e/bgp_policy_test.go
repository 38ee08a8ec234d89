//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

// leakedPrefixes is how many host routes the router sends the directors.
const leakedPrefixes = 1000

// leaked is the i-th of them, in 198.18.0.0/15 (no address of the lab).
func leaked(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
}

// TestBGPImportPolicy: a router that sends the directors 1,000 routes
// steers nothing: none reaches a kernel routing table or lvsd's RIB, the
// router hears back only the VIP, a max_prefixes breach is logged once and
// the VIP stays announced. The speaker listens nowhere unless
// listen_addresses says where, and there only for its routers.
func TestBGPImportPolicy(t *testing.T) {
	l := newECMPLab(t, ecmpOptions{directors: 2})
	d1, d2 := l.ds["director"], l.ds["director2"]
	// director: max_prefixes 500, no listener; director2: the default 100
	// and a listener on its address.
	b, err := os.ReadFile(d1.config())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d1.config(), strings.Replace(string(b), "connect_retry: 1s,", "connect_retry: 1s, max_prefixes: 500,", 1))
	b, err = os.ReadFile(d2.config())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d2.config(), string(b)+fmt.Sprintf("  listen_addresses: [%s]\n", d2.host.V4)) // the bgp block is last

	// The router sends every director its 1,000 routes (the lab's router
	// sends nothing) and keeps what each director sends before its own
	// import filter, which would hide a leak back.
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "route-map leak-all permit 10\n!\nrouter bgp %d\n no bgp network import-check\n address-family ipv4 unicast\n",
		ecmplab.RouterASN)
	for i := range leakedPrefixes {
		fmt.Fprintf(&cfg, "  network %s\n", leaked(i))
	}
	for _, d := range []*lvsd{d1, d2} {
		fmt.Fprintf(&cfg, "  neighbor %s route-map leak-all out\n  neighbor %s soft-reconfiguration inbound\n", d.host.V4, d.host.V4)
	}
	cfg.WriteString(" exit-address-family\n!\n")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := l.frr.Configure(ctx, cfg.String()); err != nil {
		t.Fatal(err)
	}

	l.start("director", "director2")
	for _, c := range []struct {
		d           *lvsd
		maxPrefixes int
	}{{d1, 500}, {d2, bgp.DefaultMaxPrefixes}} {
		id := c.d.host.ID
		// The router also sends back the VIP from the other director,
		// which GoBGP keeps too (marked as an AS loop).
		st := waitReceived(t, c.d, leakedPrefixes, 90*time.Second)
		line := c.d.waitLog(0, 30*time.Second, fmt.Sprintf("more than max_prefixes %d", c.maxPrefixes), "level=WARN",
			fmt.Sprintf("peer=%s", l.tp.Router().V4))
		t.Logf("%s: received %d; %s", id, st.Peers[0].Received, line)
		if st.Imported != 0 || st.Peers[0].Accepted != 0 {
			t.Errorf("%s imported routes from the router: %+v", id, st)
		}
		routes, err := c.d.host.Run(ctx, "ip", "route", "show", "table", "all")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(routes, "198.18.") {
			t.Errorf("%s's kernel has a route the router sent:\n%s", id, routes)
		}
		sent := frrRoutes(t, l.frr, c.d.host.V4, "received-routes")
		if want := []string{netip.PrefixFrom(ecmpVIP, 32).String()}; !slices.Equal(sent, want) {
			t.Errorf("the router received %v from %s, want only the VIP %v", sent, id, want)
		}
		if adv := frrRoutes(t, l.frr, c.d.host.V4, "advertised-routes"); len(adv) < leakedPrefixes {
			t.Errorf("the router advertised only %d routes to %s, want %d", len(adv), id, leakedPrefixes)
		}
	}

	// Past max_prefixes the sessions stay and the VIP with them. A
	// session may still flap when the emulated machine starves BFD (seen:
	// both at once, 90 s in); none may go down for the prefixes, and each
	// session warns once.
	time.Sleep(5 * time.Second)
	l.waitPaths(2, 30*time.Second)
	for _, d := range []*lvsd{d1, d2} {
		p := bgpStatus(t, d).Peers[0]
		if p.State != bgp.StateEstablished || strings.Contains(p.LastFlapReason, "prefixes") || p.PrefixBreaches < 1 {
			t.Errorf("%s: session %+v; want established, never closed for the prefixes, a breach counted", d.host.ID, p)
		}
		if n := strings.Count(d.log(), "more than max_prefixes"); n != p.PrefixBreaches || n > p.Flaps+1 {
			t.Errorf("%s warned %d times in %d sessions (%d breaches counted), want once per session", d.host.ID, n, p.Flaps+1, p.PrefixBreaches)
		}
		if p.Flaps > 0 {
			t.Logf("%s: %d flaps, the last: %s", d.host.ID, p.Flaps, p.LastFlapReason)
		}
	}

	// Listening: director nowhere, director2 on its address only.
	for _, c := range []struct {
		d    *lvsd
		want []string
	}{{d1, nil}, {d2, []string{netip.AddrPortFrom(d2.host.V4, 179).String()}}} {
		if got := listeners179(t, c.d.host); !slices.Equal(got, c.want) {
			t.Errorf("%s listens on %v, want %v", c.d.host.ID, got, c.want)
		}
	}
	// director2 closes a connection from a host it has no peer for.
	conn, err := l.tp.RS(1).Dial(ctx, "tcp", netip.Addr{}, netip.AddrPortFrom(d2.host.V4, 179))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	if n != 0 || err == nil || os.IsTimeout(err) {
		t.Errorf("a connection from %s to director2's listener read %d bytes, %v; want it closed", l.tp.RS(1).V4, n, err)
	} else {
		t.Logf("a connection from %s was closed: %v (io.EOF: %t)", l.tp.RS(1).V4, err, err == io.EOF)
	}
}

// bgpStatus is lvsd status --json's bgp part.
func bgpStatus(t *testing.T, d *lvsd) *bgp.Status {
	t.Helper()
	out, code := runLVSD(t, d.host, "status", "--json", "--socket=/run/lvsd-e2e/"+d.host.Name+".sock")
	if code != 0 {
		t.Fatalf("lvsd status --json on %s: exit %d: %s", d.host.ID, code, out)
	}
	var st views.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("lvsd status --json: %v: %s", err, out)
	}
	if st.BGP == nil || len(st.BGP.Peers) != 1 {
		t.Fatalf("lvsd status --json on %s has no BGP peer: %s", d.host.ID, out)
	}
	return st.BGP
}

// waitReceived waits until the director counts n prefixes (or more) from
// its router.
func waitReceived(t *testing.T, d *lvsd, n uint64, timeout time.Duration) *bgp.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := bgpStatus(t, d)
		if st.Peers[0].Received >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s counts %d prefixes from the router, want %d: %+v", d.host.ID, st.Peers[0].Received, n, st.Peers[0])
		}
		time.Sleep(2 * time.Second) // an lvsd exec costs the emulated machine 0.1-0.5 s
	}
}

// frrRoutes lists the prefixes of `show bgp ipv4 unicast neighbors ADDR
// received-routes` or `advertised-routes` on the router.
func frrRoutes(t *testing.T, f *topo.FRR, neighbor netip.Addr, which string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := f.Vtysh(ctx, fmt.Sprintf("show bgp ipv4 unicast neighbors %s %s json", neighbor, which))
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"received-routes": "receivedRoutes", "advertised-routes": "advertisedRoutes"}[which]
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s of %s: %v: %s", which, neighbor, err, out)
	}
	var routes map[string]json.RawMessage
	if raw, ok := v[key]; ok {
		if err := json.Unmarshal(raw, &routes); err != nil {
			t.Fatalf("%s of %s: %v: %s", which, neighbor, err, out)
		}
	}
	var prefixes []string
	for p := range routes {
		prefixes = append(prefixes, p)
	}
	slices.Sort(prefixes)
	return prefixes
}

// listeners179 lists the local addresses of the host's TCP listeners on
// port 179.
func listeners179(t *testing.T, h *topo.Host) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h.Run(ctx, "ss", "-ltnH")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && strings.HasSuffix(f[3], ":179") {
			got = append(got, f[3])
		}
	}
	return got
}
