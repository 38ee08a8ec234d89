//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestConfigSync: three directors with identities and cluster.config_sync,
// director1 the only config source. A service file written on director1
// is in force on director2 and director3 (their IPVS has it) within one
// second, and clients reach it; a file with an error written on
// director1 is refused on all three with director1's file:line:col and
// the same message, and written nowhere; deleting the files on director1
// removes the service everywhere; a file the operator placed on
// director2 is left as it is when director1 publishes one of the same
// name, which director3 takes, and director2 reports the conflict.
func TestConfigSync(t *testing.T) {
	base := netip.MustParseAddr("10.0.0.50")
	fresh := netip.MustParseAddr("10.0.0.52")
	shared := netip.MustParseAddr("10.0.0.53")
	tp := clusterSetup(t, base, fresh, shared)
	src := tp.Directors()[0].ID
	ds, _ := identityCluster(t, tp, clusterKey(t), fmt.Sprintf("  config_sync: true\n  config_sources: [%s]\n", src), base)
	a, b, c := ds[0], ds[1], ds[2]
	settle(t, tp, base, time.Second, 30*time.Second)
	for _, l := range ds {
		l.waitLog(0, 10*time.Second, "config sync running")
	}
	services := func(l *lvsd) string { return filepath.Join(l.dir, "services.d") }
	service := func(name string, vip netip.Addr, backends ...netip.Addr) string {
		s := fmt.Sprintf("service: %s\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n", name, vip)
		for _, be := range backends {
			s += fmt.Sprintf("  - {address: %s}\n", be)
		}
		return s
	}
	rs1, rs2 := tp.RS(1).V4, tp.RS(2).V4

	// The operator's own file on director2, in force there first.
	mark := b.logSize()
	local := service("shared", shared, rs1)
	writeAtomic(t, filepath.Join(services(b), "shared.yaml"), local)
	b.waitLog(mark, 15*time.Second, "msg=applied", "op=add-service", shared.String())

	// 1. A new service on director1 reaches the others within a second.
	marks := []int{a.logSize(), b.logSize(), c.logSize()}
	writeAtomic(t, filepath.Join(services(a), "fresh.yaml"), service("fresh", fresh, rs1, rs2))
	// From when the file was written: the test's own process may be
	// descheduled between taking the time and writing.
	fi, err := os.Stat(filepath.Join(services(a), "fresh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	start := fi.ModTime()
	for i, l := range []*lvsd{b, c} {
		line := l.waitLog(marks[i+1], 10*time.Second, "msg=applied", "op=add-service", fresh.String())
		took := lineAt(t, line).Sub(start)
		t.Logf("%s: fresh.yaml written on %s, in IPVS on %s %v later", l.host.ID, src, l.host.ID, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("%s had the new service %v after it was written on %s, want within 1s", l.host.ID, took, src)
		}
		if save := ipvsSave(t, l.host); !strings.Contains(save, fresh.String()+":80") {
			t.Errorf("%s's IPVS lacks %s:80:\n%s", l.host.ID, fresh, save)
		}
		if to, err := os.Readlink(filepath.Join(services(l), "fresh.yaml")); err != nil || to != ".cluster/fresh.yaml" {
			t.Errorf("%s: services.d/fresh.yaml is not the link to the managed file: %q, %v", l.host.ID, to, err)
		}
	}
	// director1 applies its own file by its watch (once it stayed the
	// same for a check), as without config sync.
	a.waitLog(marks[0], 15*time.Second, "msg=applied", "op=add-service", fresh.String())
	reachWithin(t, tp.Client(), fresh, 20*time.Second)

	// 2. A file with an error is refused on all three, with the
	// publisher's file:line:col.
	marks = []int{a.logSize(), b.logSize(), c.logSize()}
	bad := "service: bad\nvip: 10.0.0.300\nports: [80]\nforwarding: dr\nbackends:\n  - {address: " + rs1.String() + "}\n"
	writeAtomic(t, filepath.Join(services(a), "bad.yaml"), bad)
	const problem = `vip \"10.0.0.300\" is not an IP address`
	a.waitLog(marks[0], 15*time.Second, "configuration rejected", "bad.yaml:2:6:", problem)
	for i, l := range []*lvsd{b, c} {
		l.waitLog(marks[i+1], 10*time.Second, "config sync: refusing a published file", "publisher="+src,
			src+":"+filepath.Join(services(a), "bad.yaml")+":2:6:", problem)
		if _, err := os.Lstat(filepath.Join(services(l), "bad.yaml")); err == nil {
			t.Errorf("%s wrote the refused bad.yaml", l.host.ID)
		}
		if st := configSyncStatus(t, l.host); !strings.Contains(st.Refused["bad.yaml"], "bad.yaml:2:6: service \"bad\": vip") {
			t.Errorf("%s's config sync status does not name bad.yaml as refused: %+v", l.host.ID, st)
		}
	}

	// 3. Deleting them on director1 removes the service everywhere (its
	// backends drain, as for any service removed).
	marks = []int{a.logSize(), b.logSize(), c.logSize()}
	for _, f := range []string{"fresh.yaml", "bad.yaml"} {
		if err := os.Remove(filepath.Join(services(a), f)); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range ds {
		l.waitLog(marks[i], 15*time.Second, "msg=applied", "op=update-destination", "tcp:"+fresh.String()+":80", "(draining)")
		if l == a {
			continue
		}
		for _, f := range []string{"fresh.yaml", "bad.yaml", ".cluster/fresh.yaml"} {
			if _, err := os.Lstat(filepath.Join(services(l), f)); err == nil {
				t.Errorf("%s still has services.d/%s", l.host.ID, f)
			}
		}
	}

	// 4. director1 publishes a shared.yaml of its own: director3 takes it,
	// director2 keeps the operator's and says so.
	marks = []int{a.logSize(), b.logSize(), c.logSize()}
	writeAtomic(t, filepath.Join(services(a), "shared.yaml"), service("shared", shared, rs1, rs2))
	c.waitLog(marks[2], 10*time.Second, "msg=applied", "op=add-service", shared.String())
	b.waitLog(marks[1], 10*time.Second, "config sync: a local file overrides a publication", "shared.yaml", "publisher="+src)
	time.Sleep(time.Second) // a wrong reload on director2 would come now
	if st := configSyncStatus(t, b.host); !strings.Contains(st.Conflicts["shared.yaml"], "local file") {
		t.Errorf("director2's config sync status does not report the conflict over shared.yaml: %+v", st)
	}
	if st := configSyncStatus(t, c.host); st.Records != configSyncStatus(t, a.host).Records || len(st.Conflicts) != 0 {
		t.Errorf("director3's config sync status: %+v, want director1's records and no conflict", st)
	}
	if got, err := os.ReadFile(filepath.Join(services(b), "shared.yaml")); err != nil || string(got) != local {
		t.Errorf("director2's own shared.yaml changed: %q, %v", got, err)
	}
	if n := strings.Count(ipvsSave(t, b.host), "-t "+shared.String()+":80 -r "); n != 1 {
		t.Errorf("%s's IPVS has %d backends for %s, want its own file's 1:\n%s", b.host.ID, n, shared, ipvsSave(t, b.host))
	}
	if n := strings.Count(ipvsSave(t, c.host), "-t "+shared.String()+":80 -r "); n != 2 {
		t.Errorf("%s's IPVS has %d backends for %s, want director1's 2", c.host.ID, n, shared)
	}
	for _, l := range ds {
		l.checkAlive()
	}
}

// reachWithin retries a connection to vip:80 from client until one
// succeeds: the VIP may move once while the source applies its own file
// (its watch lets an edit settle for a check).
func reachWithin(t *testing.T, client *topo.Host, vip netip.Addr, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := echo.Ask(ctx, client, netip.Addr{}, netip.AddrPortFrom(vip, 80), echo.TCP)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection to %s:80 within %v: %v", vip, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// syncStatus is the local API's answer on /v1/config-sync.
type syncStatus struct {
	Records   int               `json:"records"`
	Digest    string            `json:"digest"`
	Refused   map[string]string `json:"refused"`
	Conflicts map[string]string `json:"conflicts"`
}

func configSyncStatus(t *testing.T, host *topo.Host) syncStatus {
	t.Helper()
	socket := "/run/lvsd-e2e/" + host.Name + ".sock"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	resp, err := client.Get("http://lvsd/v1/config-sync")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st syncStatus
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: /v1/config-sync: %s", host.ID, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
