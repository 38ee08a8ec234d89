//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestConfigDrift: two directors of a cluster run the same two services;
// a backend added to one service on director2 only, and a reload, make both
// directors name that service and the other director in `lvsd status`
// (text and JSON), in lvsd_cluster_config_drift{peer} and in one log line,
// within two heartbeats of the reload; the other service is not named.
// Putting the file back clears it everywhere. Clients reach both VIPs
// throughout.
func TestConfigDrift(t *testing.T) {
	vips := []netip.Addr{netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.51")}
	tp := topo.New(t, topo.WithDirectors(2), topo.WithRealServers(3), topo.WithClientSources(0))
	rss := tp.RealServers()
	for _, v := range vips {
		holdVIPOnLoopback(t, v, rss...)
	}
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rss...)
	ds := startCluster(t, tp, clusterKey(t), "", vips...) // web0 on 10.0.0.50, web1 on 10.0.0.51
	d1, d2 := ds[0], ds[1]
	for _, v := range vips {
		settle(t, tp, v, time.Second, 30*time.Second)
	}
	for _, pair := range [][2]*lvsd{{d1, d2}, {d2, d1}} {
		waitConfigMatch(t, pair[0], pair[1].host.ID, cluster.ConfigSame, 10*time.Second)
	}
	reach(t, tp, vips)

	// director2 gets a third backend for web1, as a push of one director
	// would leave it.
	file := filepath.Join(d2.dir, "services.d", "vip1.yaml")
	original := fmt.Sprintf("service: web1\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		vips[1], rss[0].V4, rss[1].V4)
	writeAtomic(t, file, original+fmt.Sprintf("  - {address: %s}\n", rss[2].V4))
	marks := []int{d1.logSize(), d2.logSize()}
	d2.hup()
	reloaded := lineAt(t, d2.waitLog(marks[1], 15*time.Second, "configuration reloaded", "trigger=signal", "changed=1"))
	budget := 2*cluster.DefaultHeartbeatInterval + 300*time.Millisecond // two heartbeats, and a loaded VM's scheduling
	for i, pair := range [][2]*lvsd{{d1, d2}, {d2, d1}} {
		self, peer := pair[0], pair[1]
		line := self.waitLog(marks[i], 10*time.Second, "service configuration differs from the peer's", "peer="+peer.host.ID,
			"services=web1 ", "differing=1")
		took := lineAt(t, line).Sub(reloaded)
		t.Logf("%s named the difference %v after director2's reload", self.host.ID, took)
		if took > budget {
			t.Errorf("%s logged the difference %v after the reload, more than two heartbeats (%v)", self.host.ID, took, budget)
		}
		c := waitConfigMatch(t, self, peer.host.ID, cluster.ConfigDifferent, 5*time.Second)
		if !slices.Equal(c.Services, []string{"web1"}) || c.Differing != 1 || !c.Compared || c.FlowsAtRisk {
			t.Errorf("lvsd status --json on %s: %s's config %+v, want web1 alone, compared, no ecmp risk", self.host.ID, peer.host.ID, c)
		}
		text := statusText(t, self.host)
		if want := "CONFIGURATION DIFFERS from " + peer.host.ID + " in 1 service: web1\n"; !strings.Contains(text, want) ||
			!regexp.MustCompile(`(?m)^  `+peer.host.ID+` .* DIFFERS\b`).MatchString(text) {
			t.Errorf("lvsd status on %s lacks %q and a DIFFERS column:\n%s", self.host.ID, want, text)
		}
		if m := scrapeDrift(t, self.host); m[peer.host.ID] != [2]float64{1, 1} {
			t.Errorf("metrics of %s: drift and services for %s %v, want 1 and 1", self.host.ID, peer.host.ID, m[peer.host.ID])
		}
	}
	if n := countLines(d1.logSince(marks[0]), "service configuration differs"); n != 1 {
		t.Errorf("director logged the difference %d times, want once", n)
	}
	reach(t, tp, vips)

	// The file put back: both directors agree again.
	marks = []int{d1.logSize(), d2.logSize()}
	writeAtomic(t, file, original)
	d2.hup()
	for i, pair := range [][2]*lvsd{{d1, d2}, {d2, d1}} {
		self, peer := pair[0], pair[1]
		self.waitLog(marks[i], 10*time.Second, "service configuration matches the peer's again", "peer="+peer.host.ID)
		waitConfigMatch(t, self, peer.host.ID, cluster.ConfigSame, 5*time.Second)
		if text := statusText(t, self.host); strings.Contains(text, "DIFFERS") {
			t.Errorf("lvsd status on %s after the fix:\n%s", self.host.ID, text)
		}
		if m := scrapeDrift(t, self.host); m[peer.host.ID] != [2]float64{0, 0} {
			t.Errorf("metrics of %s after the fix: %v", self.host.ID, m[peer.host.ID])
		}
	}
	reach(t, tp, vips)
}

// waitConfigMatch waits until `lvsd status --json` on l shows peer's
// configuration as match, and returns it.
func waitConfigMatch(t *testing.T, l *lvsd, peer, match string, timeout time.Duration) cluster.ConfigView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := statusPart[cluster.View](t, l.host, "cluster")
		for _, m := range v.Members {
			if m.Name == peer && m.Config != nil && m.Config.Match == match {
				return *m.Config
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lvsd status on %s: %s's configuration is not %s after %v: %+v", l.host.ID, peer, match, timeout, v.Members)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statusText(t *testing.T, h *topo.Host) string {
	t.Helper()
	out, code := runLVSD(t, h, "status", "--socket=/run/lvsd-e2e/"+h.Name+".sock")
	if code != 0 {
		t.Fatalf("lvsd status on %s: exit %d: %s", h.ID, code, out)
	}
	return out
}

// lineAt is the time of a log line of lvsd.
func lineAt(t *testing.T, line string) time.Time {
	t.Helper()
	at, ok := lineTime(line)
	if !ok {
		t.Fatalf("no time in %q", line)
	}
	return at
}

// scrapeDrift reads h's /metrics (metrics.listen's default, in h's
// namespace) and returns the drift series by peer: drift, services.
func scrapeDrift(t *testing.T, h *topo.Host) map[string][2]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return h.Dial(ctx, "tcp", netip.Addr{}, netip.MustParseAddrPort("127.0.0.1:9610"))
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://metrics/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", h.ID, err)
	}
	defer resp.Body.Close()
	series := regexp.MustCompile(`^lvsd_cluster_config_drift(_services)?\{peer="([^"]+)"\} (\S+)$`)
	out := map[string][2]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := series.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var v float64
		fmt.Sscan(m[3], &v)
		e := out[m[2]]
		e[min(len(m[1]), 1)] = v
		out[m[2]] = e
	}
	return out
}

// reach checks that a client connection to each VIP gets an answer.
func reach(t *testing.T, tp *topo.Topology, vips []netip.Addr) {
	t.Helper()
	for _, v := range vips {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := echo.Ask(ctx, tp.Client(), netip.Addr{}, netip.AddrPortFrom(v, 80), echo.TCP)
		cancel()
		if err != nil {
			t.Fatalf("connecting to %s: %v", v, err)
		}
	}
}
