package servicesdir

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
)

func TestLoadDirGood(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", `
service: web
vip: 10.0.0.50
ports: [80]
backends:
  - {address: 10.0.0.12, weight: 3}
  - {address: 10.0.0.11}
---
service: dns
vip: 10.0.0.50
protocol: udp
ports: [53, "5300-5310"]
forwarding: nat
scheduler: rr
backends:
  - {address: 10.0.0.11}
`)
	writeFile(t, dir, "ignored.txt", "not yaml at all: [")
	got, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d services, want 2", len(got))
	}
	web := got[0]
	if web.Name != "web" || web.Scheduler != "mh" || web.Forwarding != config.DR || web.Protocol != "tcp" || web.Affinity != config.AffinityNone {
		t.Errorf("web defaults wrong: %+v", web)
	}
	if web.Backends[0].Addr != netip.MustParseAddr("10.0.0.11") || web.Backends[0].Weight != config.DefaultWeight || web.Backends[1].Weight != 3 {
		t.Errorf("backends not sorted or weights wrong: %+v", web.Backends)
	}
	dns := got[1]
	if len(dns.Ports) != 2 || dns.Ports[1] != (l4.PortRange{From: 5300, To: 5310}) || dns.Line != 9 {
		t.Errorf("dns ports or line wrong: %+v line %d", dns.Ports, dns.Line)
	}
}

func TestLoadFilesConflicts(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "service: web\nvip: 10.0.0.50\nports: [80, 443]\nbackends: [{address: 10.0.0.11}]\n")
	b := writeFile(t, dir, "b.yaml", "# another team's file\nservice: web2\nvip: 10.0.0.50\nports: [\"440-450\"]\nbackends: [{address: 10.0.0.12}]\n---\nservice: web\nvip: 10.0.0.51\nports: [80]\nbackends: [{address: 10.0.0.12}]\n")
	_, err := LoadFiles(a, b)
	if err == nil {
		t.Fatal("conflicting services accepted")
	}
	for _, want := range []string{
		b + ":2:1: service \"web2\": tcp 10.0.0.50 port 443 is already served by service \"web\" (" + a + ":1)",
		b + ":7:1: service \"web\" is already defined at " + a + ":1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nwant it to contain\n%s", err, want)
		}
	}
}

func TestSteeringOverlapRules(t *testing.T) {
	svc := func(name, ranges string) string {
		return "service: " + name + "\nvip: 10.0.0.50\nports: [80]\n" + ranges + "backends: [{address: 10.0.0.11}]\n"
	}
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.yaml", svc("a", "")+"---\n"+svc("b", "source_ranges: [10.0.0.0/24]\n")+"---\n"+svc("c", "source_ranges: [10.0.0.0/25, 192.0.2.0/24]\n"))
	if _, err := LoadFiles(ok); err != nil {
		t.Fatalf("nested steering ranges rejected: %v", err)
	}
	bad := writeFile(t, dir, "bad.yaml", svc("a", "source_ranges: [10.0.0.0/24]\n")+"---\n"+svc("b", "source_ranges: [10.0.0.0/24]\n"))
	_, err := LoadFiles(bad)
	if err == nil || !strings.Contains(err.Error(), bad+":7:1: service \"b\": tcp 10.0.0.50 port 80 is already served by service \"a\"") {
		t.Fatalf("same source range twice: got %v", err)
	}
}

// A named pipe in the services directory neither blocks the loader (open
// would wait for a writer) nor is read: it is reported, and so are the
// other entries that are not regular files.
func TestServicesDirOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", svcGood)
	writeFile(t, dir, ".web.yaml.swp", "not yaml: [")
	writeFile(t, dir, "notes.txt", "not yaml: [")
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.yml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere.yaml", filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("web.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadDir(dir)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("LoadDir blocked on a named pipe")
	}
	got := strings.ReplaceAll(err.Error(), dir+"/", "")
	want := "dangling.yaml: does not exist\n" +
		"dir.yml: is a directory, not a regular file: lvsd reads only regular files from the services directory\n" +
		"pipe.yaml: is a named pipe, not a regular file: lvsd reads only regular files from the services directory\n" +
		// The symbolic link is read: web is defined twice.
		"web.yaml:1:1: service \"web\" is already defined at link.yaml:1\n" +
		"web.yaml:1:1: service \"web\": tcp 10.0.0.50 port 80 is already served by service \"web\" (link.yaml:1)"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Problems with the services directory itself are reported where the
// agent file names it.
func TestServicesDirErrors(t *testing.T) {
	for _, c := range []struct{ name, agent, want string }{
		{"missing", "interface: eth0\nservices_dir: nope\n", "lvsd.yaml:2:15: services_dir DIR/nope does not exist"},
		{"a file", "interface: eth0\nservices_dir: lvsd.yaml\n", "lvsd.yaml:2:15: services_dir DIR/lvsd.yaml is not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			a, err := config.LoadAgent(writeFile(t, dir, "lvsd.yaml", c.agent))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Load(a)
			want := strings.ReplaceAll(dir+"/"+c.want, "DIR", dir)
			if err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
}
