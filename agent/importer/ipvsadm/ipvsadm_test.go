package ipvsadm

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// table is an `ipvsadm -Sn` as ipvsadm 1.31 prints it, with every option
// lvsd maps.
const table = `-A -t 203.0.113.10:80 -s wlc
-a -t 203.0.113.10:80 -r 198.51.100.11:80 -g -w 1
-a -t 203.0.113.10:80 -r 198.51.100.12:80 -g -w 3 -x 500 -y 400
-A -t 203.0.113.10:443 -s rr -p 300 -M 255.255.255.0
-a -t 203.0.113.10:443 -r 198.51.100.11:443 -g -w 1
-a -t 203.0.113.10:443 -r 198.51.100.12:443 -g -w 0
-A -u 203.0.113.53:53 -s mh -b flag-1
-a -u 203.0.113.53:53 -r 198.51.100.21:5353 -m -w 1
-a -u 203.0.113.53:53 -r 198.51.100.22:5353 -m -w 2
-A -t 203.0.113.30:443 -s mh -b mh-fallback,mh-port
-a -t 203.0.113.30:443 -r 198.51.100.31:443 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
-a -t 203.0.113.30:443 -r 198.51.100.32:443 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
-A -t [2001:db8::10]:80 -s sh -p 60 -M 64
-a -t [2001:db8::10]:80 -r [2001:db8:1::11]:80 -g -w 1
-A --sctp-service 203.0.113.40:3868 -s lc
-a --sctp-service 203.0.113.40:3868 -r 198.51.100.41:3868 -m -w 1
`

// TestRoundTrip: the text, imported and planned by lvsd, is the table the
// text describes — services, scheduler, flags, persistence, destinations,
// forwarding, weights and thresholds.
func TestRoundTrip(t *testing.T) {
	parsed, err := Parse("ipvsadm.txt", []byte(table))
	if err != nil {
		t.Fatal(err)
	}
	res := Convert(parsed, "ipvsadm.txt")
	if _, _, notMapped := res.Counts(); notMapped > 0 {
		var b bytes.Buffer
		res.WriteReport(&b)
		t.Fatalf("something is not mapped:\n%s", b.String())
	}
	got := plan(t, res.Files)
	var want []string
	for _, e := range parsed.Entries {
		s := e.Service
		if s.Scheduler == "mh" {
			s.Flags |= spec.FlagMHFallback // lvsd always sets it with mh
		}
		line := s.String()
		dests := slices.Clone(e.Destinations)
		slices.SortFunc(dests, func(a, b spec.Destination) int { return a.DestinationKey.Compare(b.DestinationKey) })
		for _, d := range dests {
			line += fmt.Sprintf("\n  %s %s %s w=%d x=%d y=%d", d.DestinationKey, d.Forwarding, d.Tunnel, d.Weight, d.UpperThreshold, d.LowerThreshold)
		}
		want = append(want, line)
	}
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lvsd's plan of the import differs from the text\n--- lvsd\n%s\n--- ipvsadm -Sn\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// plan loads the service files as `lvsd check` does and returns the IPVS
// services lvsd would program, in the same form as the test's want.
func plan(t *testing.T, files []importer.File) []string {
	t.Helper()
	var errs config.List
	var services []*config.Service
	for _, f := range files {
		for _, s := range config.ParseServices(f.Path, []byte(f.Content), &errs, true) {
			services = append(services, &s)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("the import fails lvsd check:\n%v", errs)
	}
	agent, err := config.ParseAgent("lvsd.yaml", []byte("interface: eth0\n"))
	if err != nil {
		t.Fatal(err)
	}
	desired, err := planner.Build(agent, services)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, vs := range desired.Services {
		if vs.Internal {
			continue
		}
		line := vs.Service.String()
		for _, d := range vs.Destinations {
			line += fmt.Sprintf("\n  %s %s %s w=%d x=%d y=%d", d.Key(), vs.Forwarding, vs.Tunnel, d.Weight, d.From.UpperThreshold, d.From.LowerThreshold)
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

func TestGolden(t *testing.T) {
	parsed, err := Parse("ipvsadm.txt", []byte(table+"-A -f 7 -s rr\n-a -f 7 -r 198.51.100.9:0 -g -w 1\n-A -t 203.0.113.99:80 -s wrr -o\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Convert(parsed, "ipvsadm.txt")
	var out bytes.Buffer
	res.WriteFiles(&out)
	out.WriteString("# ==> report <==\n")
	res.WriteReport(&out)
	path := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, out.Bytes(), want)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.1:80 -s rr\n", "t:2: service tcp:10.0.0.1:80 is added twice"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1:80 -g\n", "t:1: a real server of service tcp:10.0.0.1:80, which no -A line before adds"},
		{"\n-A -t web.example:80 -s rr\n", "t:2: \"web.example:80\" is not an address with a port, like 10.0.0.1:80 or [2001:db8::1]:80 (ipvsadm -S without -n prints names: use -Sn)"},
		{"-A -s rr\n", "t:1: names no service: give -t, -u, --sctp-service ADDRESS:PORT or -f MARK"},
		{"-A -t 10.0.0.1:80 -s\n", "t:1: -s needs a value"},
		{"-A -t 10.0.0.1:80 --bogus\n", "t:1: \"--bogus\" is not an option of ipvsadm's -A or -a"},
		{"-A -t 10.0.0.1:80 -M 255.0.255.0\n", "t:1: netmask \"255.0.255.0\" has holes"},
		{"-A -t 10.0.0.1:80\n-a -t 10.0.0.1:80 -r 10.1.0.1 -w x\n", "t:2: weight \"x\" is not a whole number of at least 0"},
		{"-C\n", "t:1: names no service: give -t, -u, --sctp-service ADDRESS:PORT or -f MARK"},
		{"-E -t 10.0.0.1:80\n", "t:1: \"-E\" is not -A (add a service) or -a (add a real server)"},
	}
	for _, tc := range cases {
		_, err := Parse("t", []byte(tc.text))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.text, err, tc.want)
		}
	}
}
