//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// explanation is what the test reads of lvsd's answer (GET /v1/explain).
type explanation struct {
	Backend string `json:"backend"`
	Decided string `json:"decided_by"`
	Slot    int    `json:"slot"`
}

// explainer asks the director's local API, as `lvsd explain --json` does.
type explainer struct {
	t      *testing.T
	socket string
	client *http.Client
}

func newExplainer(t *testing.T, host *topo.Host) *explainer {
	socket := "/run/lvsd-e2e/" + host.Name + ".sock"
	return &explainer{t: t, socket: socket, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}}
}

func (x *explainer) explain(client, virtual netip.AddrPort) explanation {
	x.t.Helper()
	q := url.Values{"client": {client.String()}, "virtual": {virtual.String()}, "protocol": {"tcp"}}
	resp, err := x.client.Get("http://lvsd/v1/explain?" + q.Encode())
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e explanation
	if resp.StatusCode != http.StatusOK {
		x.t.Fatalf("explain %s: %s", client, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		x.t.Fatal(err)
	}
	return e
}

// askFrom connects from src (address and port) to dst and returns the
// server's greeting.
func askFrom(ctx context.Context, host *topo.Host, src, dst netip.AddrPort) (echo.Reply, error) {
	var c net.Conn
	err := host.Do(func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(src)}
		c, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return echo.Reply{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(line)
}

// explainFlows is how many flows each phase of TestExplain asks about and
// makes: each costs an API call and a connection under emulation, and 300
// already cover every destination's slots many times over (the tests of
// agent/maglev and TestMaglevPrediction compare the table itself).
const explainFlows = 300

// TestExplain: lvsd explain, asked before each of explainFlows new flows per
// phase (from chosen source ports), names the destination the kernel then
// picks, as its connection table shows it: as configured, after a weight
// change and after a health change. A flow with a connection entry is
// explained by it, and `lvsd explain` prints the same as the API.
func TestExplain(t *testing.T) {
	tp, d, servers := startWeighted(t)
	vip, rss, k, key := weightedVIP, tp.RealServers(), d.ipvs(), weightedKey
	virtual := netip.AddrPortFrom(vip, 80)
	x := newExplainer(t, tp.Director(1))
	source := tp.ClientSources(false)[0]

	phase := func(name string, firstPort uint16, want map[string]int) {
		t.Helper()
		dests := waitWeights(t, k, key, rss, want)
		explained := map[uint16]explanation{}
		for p := firstPort; p < firstPort+explainFlows; p++ {
			explained[p] = x.explain(netip.AddrPortFrom(source, p), virtual)
		}
		ctx := context.Background()
		for p := firstPort; p < firstPort+explainFlows; p++ {
			if _, err := askFrom(ctx, tp.Client(), netip.AddrPortFrom(source, p), virtual); err != nil {
				t.Fatalf("%s: from port %d: %v", name, p, err)
			}
		}
		if now, err := k.Destinations(ctx, key); err != nil || !sameWeights(now, dests) {
			t.Fatalf("%s: the weights changed while the flows ran (%v): the phase proves nothing", name, err)
		}
		conns, err := k.Connections(ctx)
		if err != nil {
			t.Fatal(err)
		}
		right, wrong, byConn := 0, 0, 0
		for _, c := range conns {
			p := c.Client.Port()
			e, ok := explained[p]
			if c.Virtual != virtual || c.Client.Addr() != source || !ok {
				continue
			}
			if e.Decided == "connection" {
				byConn++
			}
			if e.Backend == c.Dest.String() {
				right++
			} else if wrong++; wrong <= 5 {
				t.Errorf("%s: from port %d the kernel chose %s, lvsd explain said %+v", name, p, c.Dest, e)
			}
			delete(explained, p)
		}
		if len(explained) > 0 {
			t.Errorf("%s: %d flows have no connection entry", name, len(explained))
		}
		t.Logf("%s: %d of %d flows went where lvsd explain said beforehand (%d explained by an entry)", name, right, explainFlows, byConn)
	}

	phase("as configured", 20000, map[string]int{"rs1": 1, "rs2": 2, "rs3": 1, "rs4": 3})
	writeFile(t, d.dir+"/services.d/web.yaml", weightedService(vip, rss, 1, 2, 5, 3))
	phase("rs3 weight 1 -> 5", 21000, map[string]int{"rs1": 1, "rs2": 2, "rs3": 5, "rs4": 3})
	servers["rs2"].SetHealthy(false)
	phase("rs2 unhealthy", 22000, map[string]int{"rs1": 1, "rs2": 0, "rs3": 5, "rs4": 3})

	// An open connection is explained by its entry, whatever the table says.
	conn, err := echo.Connect(context.Background(), tp.Client(), source, virtual)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := netip.MustParseAddrPort(conn.LocalAddr().String())
	e := x.explain(client, virtual)
	if e.Decided != "connection" || e.Backend != rsAddr(rss, conn.Hello.Name) {
		t.Errorf("open connection from %s to %s: lvsd explain says %+v", client, conn.Hello.Name, e)
	}
	out, err := exec.Command(lvsdBin, "explain", "--socket", x.socket, client.String(), virtual.String()+"/tcp").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "an existing connection entry") {
		t.Errorf("lvsd explain %s: %v\n%s", client, err, out)
	}
	t.Logf("lvsd explain %s %s:\n%s", client, virtual, out)
}

func rsAddr(rss []*topo.Host, name string) string {
	for _, rs := range rss {
		if rs.ID == name {
			return netip.AddrPortFrom(rs.V4, 80).String()
		}
	}
	return ""
}
