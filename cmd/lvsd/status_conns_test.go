package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
)

func connectionList() views.ConnectionList {
	return views.ConnectionList{Schema: api.SchemaVersion, Matched: 1204, Omitted: 1201, Connections: []views.ConnectionEntry{
		{Protocol: "tcp", Client: "192.0.2.7:51000", Virtual: "10.0.0.50:80", Destination: "10.0.0.11:80", State: "ESTABLISHED",
			Expires: 899, Service: "web"},
		{Protocol: "udp", Client: "[2001:db8::7]:5353", Virtual: "[fd00::53]:53", Destination: "[fd00::11]:53", State: "UDP",
			Expires: 58, Service: "dns"},
		{Protocol: "ip", Client: "192.0.2.0:0", Virtual: "10.0.0.51:0", Destination: "10.0.0.12:0", State: "NONE", Expires: 3600},
	}}
}

func TestWriteConnections(t *testing.T) {
	for _, c := range []struct {
		golden string
		list   views.ConnectionList
	}{
		{"connections.golden", connectionList()},
		{"connections-none.golden", views.ConnectionList{Schema: api.SchemaVersion}},
	} {
		var b bytes.Buffer
		if err := writeConnections(&b, c.list); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, c.golden, b.Bytes())
	}
}

// lvsd status --connections asks for the connection route with the
// service and limit; it cannot be combined with the other tables.
func TestStatusConnectionsCommand(t *testing.T) {
	var asked []string
	ctx, sock := fakeAgent(t, views.RouteConnections, func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RawQuery)
		api.WriteCompactJSON(w, connectionList())
	})
	for _, c := range []struct {
		args  []string
		query string // "": a usage error saying usage
		usage string
		out   string
	}{
		{args: nil, query: "limit=1000", out: "1201 left out"},
		{args: []string{"--service", "web,db-*", "--limit", "3"}, query: "limit=3&service=web&service=db-%2A", out: "ESTABLISHED"},
		{args: []string{"--json"}, query: "limit=1000", out: `"schema": 1,`},
		{args: []string{"--limit", "0"}, usage: "--limit 0: want a whole number from 1 to 100000"},
		{args: []string{"--stats"}, usage: "--connections and --stats: choose one"},
		{args: []string{"--all"}, usage: "--connections and --all: choose one"},
	} {
		asked = nil
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"status", "--socket", sock, "--connections"}, c.args...), &out, &errOut)
		if c.usage != "" {
			if exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.usage) {
				t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.usage)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if len(asked) != 1 || asked[0] != c.query || !strings.Contains(out.String(), c.out) {
			t.Errorf("%v asked %q (want %q), printed:\n%s", c.args, asked, c.query, out.String())
		}
	}
}

func TestStatusStatsAndRateExclusive(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"status", "--socket", "/nonexistent", "--stats", "--rate"}, &out, &errOut)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--rate and --stats: choose one") {
		t.Errorf("%v, want a usage error", err)
	}
}
