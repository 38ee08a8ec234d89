package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// connDirector is a director of two services (web on :80 and :443, mail
// on :25) whose connection table holds n entries of web:80, one of mail,
// a persistence template of web, and one of a service lvsd does not have.
func connDirector(t *testing.T, n int) (*testEnv, *Views) {
	t.Helper()
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80, 443]\nbackends:\n  - {address: 10.0.0.11}\n")
	e.service("mail", "service: mail\nvip: 10.0.0.51\nports: [25]\nbackends:\n  - {address: 10.0.0.12}\n")
	a := e.agent()
	e.reconcile(a)
	conn := func(proto l4.Protocol, client, virtual, dest, state string, expires time.Duration) ipvs.Connection {
		return ipvs.Connection{Protocol: proto, Client: netip.MustParseAddrPort(client), Virtual: netip.MustParseAddrPort(virtual),
			Dest: netip.MustParseAddrPort(dest), State: state, Expires: expires}
	}
	var conns []ipvs.Connection
	for i := range n {
		conns = append(conns, conn(l4.TCP, fmt.Sprintf("192.0.%d.7:%d", 2+i/20000, 40000+i%20000), "10.0.0.50:80", "10.0.0.11:80",
			"ESTABLISHED", 900*time.Second))
	}
	conns = append(conns,
		conn(l4.TCP, "192.0.2.8:40000", "10.0.0.51:25", "10.0.0.12:25", "FIN_WAIT", 100*time.Second),
		conn(0, "192.0.2.0:0", "10.0.0.50:0", "10.0.0.11:0", "NONE", 300*time.Second),
		conn(l4.UDP, "192.0.2.9:53", "10.0.0.99:53", "10.0.0.13:53", "UDP", 290*time.Second))
	e.conns.Set(conns, nil)
	return e, a
}

func TestConnections(t *testing.T) {
	_, a := connDirector(t, 5)
	for _, c := range []struct {
		name     string
		q        ConnectionQuery
		matched  int
		listed   int
		services map[string]int // entries listed per service ("": not lvsd's)
		err      string
	}{
		{name: "everything", q: ConnectionQuery{}, matched: 8, listed: 8, services: map[string]int{"web": 6, "mail": 1, "": 1}},
		{name: "web", q: ConnectionQuery{Services: []string{"web"}}, matched: 6, listed: 6, services: map[string]int{"web": 6}},
		{name: "glob", q: ConnectionQuery{Services: []string{"m*"}}, matched: 1, listed: 1, services: map[string]int{"mail": 1}},
		{name: "limit", q: ConnectionQuery{Services: []string{"web"}, Limit: 2}, matched: 6, listed: 2, services: map[string]int{"web": 2}},
		{name: "unknown service", q: ConnectionQuery{Services: []string{"dns"}}, err: "no configured service"},
		{name: "limit too large", q: ConnectionQuery{Limit: MaxConnectionLimit + 1}, err: "not between 1 and"},
		{name: "negative limit", q: ConnectionQuery{Limit: -1}, err: "not between 1 and"},
	} {
		t.Run(c.name, func(t *testing.T) {
			list, err := a.Connections(context.Background(), c.q)
			if c.err != "" {
				if err == nil || !errors.Is(err, errBadQuery) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want a bad query saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if list.Schema != api.SchemaVersion || list.Matched != c.matched || len(list.Connections) != c.listed ||
				list.Omitted != c.matched-c.listed {
				t.Errorf("schema %d, matched %d, listed %d, omitted %d; want %d, %d, %d", list.Schema, list.Matched,
					len(list.Connections), list.Omitted, c.matched, c.listed, c.matched-c.listed)
			}
			got := map[string]int{}
			for _, e := range list.Connections {
				got[e.Service]++
			}
			if fmt.Sprint(got) != fmt.Sprint(c.services) {
				t.Errorf("per service %v, want %v", got, c.services)
			}
		})
	}
	list, _ := a.Connections(context.Background(), ConnectionQuery{Services: []string{"web"}, Limit: 1})
	want := ConnectionEntry{Protocol: "tcp", Client: "192.0.2.7:40000", Virtual: "10.0.0.50:80", Destination: "10.0.0.11:80",
		State: "ESTABLISHED", Expires: 900, Service: "web"}
	if list.Connections[0] != want {
		t.Errorf("entry %+v, want %+v", list.Connections[0], want)
	}
}

// A table of 200,000 entries is walked, not kept: the answer holds the
// limit's worth.
func TestConnectionsLargeTableBounded(t *testing.T) {
	_, a := connDirector(t, 200_000)
	list, err := a.Connections(context.Background(), ConnectionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Connections) != DefaultConnectionLimit || list.Matched != 200_003 || list.Omitted != 200_003-DefaultConnectionLimit {
		t.Errorf("listed %d of %d (omitted %d)", len(list.Connections), list.Matched, list.Omitted)
	}
}

// Every JSON object the API answers carries the schema version (what the
// CLI's --json prints).
func TestAPIAnswersCarrySchema(t *testing.T) {
	_, a := connDirector(t, 1)
	h := a.APIHandler()
	for _, route := range []string{RouteStatus, RouteStatus + "?view=summary", RouteConnections + "?limit=1", RouteBackends,
		RouteExplain + "?client=192.0.2.7:40000&virtual=10.0.0.50:80&protocol=tcp"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, route, nil))
		var answer struct {
			Schema *int `json:"schema"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s (%v)", route, rec.Code, rec.Body, err)
			continue
		}
		if answer.Schema == nil || *answer.Schema != api.SchemaVersion {
			t.Errorf("GET %s: schema %v, want %d: %s", route, answer.Schema, api.SchemaVersion, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, RouteConnections+"?limit=x", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("limit=x: %d %s, want 400", rec.Code, rec.Body)
	}
}
