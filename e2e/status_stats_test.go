//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/ipvs"
)

// statusJSON is what TestStatusStatsAndConnections reads of
// `lvsd status --json` (e2e does not import agent).
type statusJSON struct {
	Schema   int `json:"schema"`
	Services []struct {
		Name     string `json:"name"`
		Backends struct {
			Connections uint64 `json:"connections_total"`
			PacketsIn   uint64 `json:"packets_in"`
			Rates       struct {
				Connections uint64 `json:"connections_per_second"`
				PacketsIn   uint64 `json:"packets_in_per_second"`
			} `json:"rates"`
		} `json:"backends"`
		Destinations []struct {
			Address     string `json:"address"`
			Connections uint64 `json:"connections_total"`
			PacketsIn   uint64 `json:"packets_in"`
		} `json:"destinations"`
	} `json:"services"`
}

// connectionsJSON is what it reads of `lvsd status --connections --json`.
type connectionsJSON struct {
	Schema      int `json:"schema"`
	Matched     int `json:"matched"`
	Omitted     int `json:"omitted"`
	Connections []struct {
		Protocol    string  `json:"protocol"`
		Client      string  `json:"client"`
		Virtual     string  `json:"virtual"`
		Destination string  `json:"destination"`
		State       string  `json:"state"`
		Expires     float64 `json:"expires_seconds"`
		Service     string  `json:"service"`
	} `json:"connections"`
}

// TestStatusStatsAndConnections: after real traffic through the VIP,
// `lvsd status --stats` shows the kernel's counters per backend (as the
// kernel lists them) and per service (their sum), `--rate` the kernel's
// rate estimates, and `--connections` the kernel's connection entries,
// open connections as ESTABLISHED with their clients, bounded by --limit.
func TestStatusStatsAndConnections(t *testing.T) {
	tp, d, _ := startWeighted(t)
	director, k := tp.Director(1), d.ipvs()
	virtual := netip.AddrPortFrom(weightedVIP, 80)
	source := tp.ClientSources(false)[0]
	ctx := context.Background()
	const closed, open = 20, 5
	for range closed {
		c, err := echo.Connect(ctx, tp.Client(), source, virtual)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	var held []string
	for range open {
		c, err := echo.Connect(ctx, tp.Client(), source, virtual)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c.LocalAddr().String())
	}
	status := func(v any, args ...string) string {
		t.Helper()
		out, code := runLVSD(t, director, append([]string{"status", "--socket=/run/lvsd-e2e/" + director.Name + ".sock"}, args...)...)
		if code != 0 {
			t.Fatalf("lvsd status %v: exit %d: %.2000s", args, code, out)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("lvsd status %v: %v: %.2000s", args, err, out)
			}
		}
		return out
	}

	// --stats: the kernel's counters, per destination as the kernel lists
	// them. The kernel adds its per-CPU counters up for netlink in its rate
	// estimator, every 2 s: they show the traffic within a few seconds.
	var st statusJSON
	deadline := time.Now().Add(6 * time.Second)
	for {
		status(&st, "--service", "web", "--stats", "--json")
		if st.Schema != 1 || len(st.Services) != 1 {
			t.Fatalf("schema %d, %d services", st.Schema, len(st.Services))
		}
		if st.Services[0].Backends.Connections >= closed+open || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	kernel, err := k.Destinations(ctx, weightedKey)
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]ipvs.Destination{}
	for _, kd := range kernel {
		byAddr[kd.DestinationKey.String()] = kd
	}
	web := st.Services[0]
	var sum uint64
	for _, dst := range web.Destinations {
		kd := byAddr[dst.Address]
		if dst.Connections != kd.Traffic().Connections || dst.PacketsIn != kd.Traffic().PacketsIn {
			t.Errorf("%s: status says %d connections, %d packets in; the kernel %d, %d", dst.Address, dst.Connections,
				dst.PacketsIn, kd.Traffic().Connections, kd.Traffic().PacketsIn)
		}
		sum += dst.Connections
	}
	if web.Backends.Connections != closed+open || sum != closed+open || web.Backends.PacketsIn < 2*(closed+open) {
		t.Errorf("service: %d connections (backends' sum %d), %d packets in; want %d connections, at least 2 packets each",
			web.Backends.Connections, sum, web.Backends.PacketsIn, closed+open)
	}
	table := status(nil, "--service", "web", "--stats")
	if !strings.Contains(table, "CONNS") || !strings.Contains(table, strconv.Itoa(closed+open)) {
		t.Errorf("lvsd status --stats:\n%s", table)
	}

	// --rate: the kernel's estimator runs every 2 s; within a few the
	// connections just made show as a rate.
	deadline = time.Now().Add(6 * time.Second)
	for {
		status(&st, "--service", "web", "--rate", "--json")
		if r := st.Services[0].Backends.Rates; r.Connections > 0 && r.PacketsIn > 0 {
			t.Logf("rates: %d conn/s, %d packets/s in", r.Connections, r.PacketsIn)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rate estimate 6 s after %d connections: %+v", closed+open, st.Services[0].Backends.Rates)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if table := status(nil, "--service", "web", "--rate"); !strings.Contains(table, "CPS") {
		t.Errorf("lvsd status --rate:\n%s", table)
	}

	// --connections: the kernel's entries of the VIP, the held ones
	// ESTABLISHED with their client addresses.
	var cs connectionsJSON
	status(&cs, "--connections", "--service", "web", "--json")
	entries, err := k.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inKernel := 0
	for _, c := range entries {
		if c.Virtual == virtual {
			inKernel++
		}
	}
	if cs.Schema != 1 || cs.Matched != inKernel || cs.Matched < closed+open || cs.Omitted != 0 {
		t.Errorf("schema %d, %d entries matched (%d omitted); the kernel has %d of the VIP, want at least %d",
			cs.Schema, cs.Matched, cs.Omitted, inKernel, closed+open)
	}
	established := map[string]bool{}
	for _, c := range cs.Connections {
		if c.State == "ESTABLISHED" && c.Service == "web" && c.Protocol == "tcp" && c.Virtual == virtual.String() && c.Expires > 0 {
			established[c.Client] = true
		}
	}
	for _, h := range held {
		if !established[h] {
			t.Errorf("open connection from %s not listed as ESTABLISHED: %+v", h, cs.Connections)
		}
	}
	status(&cs, "--connections", "--service", "web", "--limit", "3", "--json")
	if len(cs.Connections) != 3 || cs.Omitted != cs.Matched-3 {
		t.Errorf("--limit 3: %d listed, %d omitted of %d", len(cs.Connections), cs.Omitted, cs.Matched)
	}
	if out := status(nil, "--connections", "--limit", "3"); !strings.Contains(out, "left out") || strings.Count(out, virtual.String()) != 3 {
		t.Errorf("lvsd status --connections --limit 3:\n%s", out)
	}
}
