//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
)

// badGood is the valid service every bad case is added to, so cases can
// also conflict with it across files. It sorts first: lvsd reads files in
// name order and reports a cross-file conflict on the later file.
const (
	badGoodFile = "00-web.yaml"
	badGood     = "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: dr\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n"
)

// badCase is one malformed service file and the error lvsd must report:
// file:line:col: and a recognisable part of the message.
type badCase struct {
	name      string // the file is services.d/<name>.yaml
	body      string
	line, col int
	msg       string
}

// The head and tail most cases share: service "a" on another VIP.
const (
	bh = "service: a\nvip: 10.0.0.51\n"
	bb = "backends:\n  - {address: 10.0.0.11}\n"
)

var badCases = []badCase{
	// Strict decoding.
	{"unknown-key", bh + "ports: [80]\ncolour: red\n" + bb, 4, 1, `unknown key "colour"`},
	{"unknown-backend-key", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12, wieght: 2}\n", 6, 26, `unknown key "wieght" (did you mean weight?)`},
	{"duplicate-key", bh + "ports: [80]\nvip: 10.0.0.52\n" + bb, 4, 1, `key "vip" is given twice (first at line 2)`},
	{"syntax-unclosed", bh + "ports: [80\n" + bb, 4, 1, `a list written [a, b] needs a ',' between items and a ']' at its end`},
	{"syntax-indent", bh + "ports: [80]\nbackends:\n  - address: 10.0.0.11\n   weight: 2\n", 6, 4, "a value where none can go"},
	{"syntax-tab", bh + "\tports: [80]\n" + bb, 3, 1, "YAML indents with spaces only"},
	{"type-ports-scalar", bh + "ports: 80\n" + bb, 3, 8, "ports: want a list"},
	{"type-backends-map", bh + "ports: [80]\nbackends: {address: 10.0.0.11}\n", 4, 11, "backends: want a list ([a, b], or one \"- item\" line each), not a mapping"},
	{"type-weight-string", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: heavy}\n", 5, 34, "weight: want a whole number (0-65535), not \"heavy\""},
	// Values are read as written (issue 14).
	{"weight-float", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 0.5}\n", 5, 34, "weight: 0.5 is not a whole number (0-65535)"},
	{"port-hex", bh + "ports: [0x50]\n" + bb, 3, 9, `port "0x50" is not a port (1-65535)`},
	{"name-number", "service: 1.0\nvip: 10.0.0.51\nports: [80]\n" + bb, 1, 10, `service: 1.0 is a number, not text: write "1.0" in quotes`},
	{"after-empty-document", "---\n---\n" + bh + "ports: [80]\n", 3, 1, "backends is required"},
	// Addresses.
	{"vip-bad", "service: a\nvip: 10.0.0.300\nports: [80]\n" + bb, 2, 6, `vip "10.0.0.300" is not an IP address`},
	{"vip-multicast", "service: a\nvip: 224.0.0.9\nports: [80]\n" + bb, 2, 6, "vip 224.0.0.9 must be a unicast address"},
	{"vip-missing", "service: a\nports: [80]\n" + bb, 1, 1, "vip is required"},
	{"backend-bad-ip", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: rs2.example}\n", 6, 15, `backend address "rs2.example" is not an IP address`},
	{"family-mix", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: \"fd00::12\"}\n", 6, 15, "backend fd00::12 and vip 10.0.0.51 are of different IP families"},
	// Ports.
	{"port-zero", bh + "ports: [80, 0]\n" + bb, 3, 13, `port "0" is not a port (1-65535)`},
	{"port-too-big", bh + "ports: [70000]\n" + bb, 3, 9, `port "70000" is not a port (1-65535)`},
	{"port-name", bh + "ports: [http]\n" + bb, 3, 9, `port "http" is not a port (1-65535)`},
	{"port-range-reversed", bh + "ports: [\"90-80\"]\n" + bb, 3, 9, `port range "90-80" ends before it starts`},
	{"ports-overlap", bh + "ports: [80, \"79-81\"]\n" + bb, 3, 8, "ports 79-81 and 80 overlap"},
	{"ports-all-plus", bh + "ports: [all, 80]\n" + bb, 3, 9, `"all" cannot be combined with other ports`},
	{"ports-empty", bh + "ports: []\n" + bb, 1, 1, "ports is required"},
	{"dr-backend-port", bh + "ports: [80]\nforwarding: dr\nbackends:\n  - {address: 10.0.0.11, port: 8080}\n", 6, 32, "forwarding dr cannot change the port"},
	{"nat-port-two-ports", bh + "ports: [80, 443]\nforwarding: nat\nbackends:\n  - {address: 10.0.0.11, port: 8080}\n", 6, 32, "a backend port needs a service with exactly one port"},
	{"backend-port-zero", bh + "ports: [80]\nforwarding: nat\nbackends:\n  - {address: 10.0.0.11, port: 0}\n", 6, 32, "port 0 is not in 1-65535"},
	// Backends.
	{"weight-too-big", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 70000}\n", 5, 34, "weight 70000 is not in 0-65535"},
	{"weight-negative", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12, weight: -1}\n", 6, 34, "weight -1 is not in 0-65535"},
	{"backends-empty", bh + "ports: [80]\nbackends: []\n", 1, 1, "backends is required"},
	{"backends-missing", bh + "ports: [80]\n", 1, 1, "backends is required"},
	{"backend-twice", bh + "ports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.11}\n", 6, 15, "backend 10.0.0.11 is listed twice"},
	// Enumerations.
	{"bad-forwarding", bh + "ports: [80]\nforwarding: tun\n" + bb, 4, 13, `forwarding "tun" is not one of dr, nat, fullnat, tunnel`},
	{"bad-scheduler", bh + "ports: [80]\nscheduler: random\n" + bb, 4, 12, `scheduler "random" is not one of mh, rr`},
	{"bad-affinity", bh + "ports: [80]\naffinity: sticky\n" + bb, 4, 11, `affinity "sticky" is not one of none, client-ip`},
	{"bad-protocol", bh + "protocol: icmp\nports: [80]\n" + bb, 3, 11, `protocol "icmp" is not one of tcp, udp, sctp, any`},
	// Names and conflicts.
	{"name-missing", "vip: 10.0.0.51\nports: [80]\n" + bb, 1, 1, "service: a name is required"},
	{"name-with-space", "service: my web\nvip: 10.0.0.51\nports: [80]\n" + bb, 1, 10, `service name "my web" must not contain spaces or slashes`},
	{"name-twice-in-file", bh + "ports: [80]\n" + bb + "---\nservice: a\nvip: 10.0.0.52\nports: [80]\n" + bb, 7, 1, `service "a" is already defined at`},
	{"name-twice-across-files", "service: web\nvip: 10.0.0.51\nports: [80]\n" + bb, 1, 1, `service "web" is already defined at`},
	{"vip-port-across-files", "service: other\nvip: 10.0.0.50\nports: [443, 80]\n" + bb, 1, 1, `tcp 10.0.0.50 port 80 is already served by service "web"`},
	{"range-overlap-across-files", "service: other\nvip: 10.0.0.50\nports: [\"70-90\"]\n" + bb, 1, 1, `tcp 10.0.0.50 port 80 is already served by service "web"`},
	{"fullnat-without-snat", bh + "ports: [80]\nforwarding: fullnat\n" + bb, 1, 1, "forwarding fullnat needs fullnat.source_addresses"},
	// Tunnels.
	{"tunnel-gue-without-port", bh + "ports: [80]\nforwarding: tunnel\ntunnel: {encap: gue}\n" + bb, 5, 10, "encap gue needs tunnel.port"},
	{"tunnel-with-nat-gateway", bh + "ports: [80]\nforwarding: tunnel\nnat: {gateway: 10.0.0.9}\n" + bb, 5, 16, "nat.gateway needs forwarding: nat"},
	{"tunnel-gre-checksum", bh + "ports: [80]\nforwarding: tunnel\ntunnel: {encap: gre, checksum: checksum}\n" + bb, 5, 32, "drops GRE packets with a checksum"},
	{"tunnel-block-without-tunnel", bh + "ports: [80]\ntunnel: {encap: ipip}\n" + bb, 4, 10, "tunnel needs forwarding: tunnel"},
}

// TestBadConfig: for each malformed service file `lvsd check` exits 1 and
// names the file with its exact line and column and says what is wrong;
// and a running agent sent SIGHUP with the same file stays up, logs
// "configuration rejected" for it, and changes nothing in the kernel
// (`ipvsadm -Sn`, `nft list ruleset` and the interface's addresses are
// byte-identical), applying no op at all; the good file keeps serving.
func TestBadConfig(t *testing.T) {
	if len(badCases) < 25 {
		t.Fatalf("only %d bad cases, want ≥25", len(badCases))
	}
	t.Run("check", func(t *testing.T) {
		// The case folders only matter while lvsd check runs: tmpfs, not
		// the slow 9p share.
		dir := t.TempDir()
		// Each case in a folder of its own, beside the good file; several
		// lvsd processes at a time (an exec is slow under TCG, not busy).
		type outcome struct {
			out  string
			code int
			err  error
		}
		outcomes := make([]outcome, len(badCases))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for i, c := range badCases {
			cdir := filepath.Join(dir, "check", c.name)
			if err := os.MkdirAll(filepath.Join(cdir, "services.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(cdir, "lvsd.yaml"), "node: d\nrole: director\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n")
			writeFile(t, filepath.Join(cdir, "services.d", badGoodFile), badGood)
			writeFile(t, filepath.Join(cdir, "services.d", c.name+".yaml"), c.body)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				o := &outcomes[i]
				o.out, o.code, o.err = lvsdCheck(filepath.Join(cdir, "lvsd.yaml"))
			}()
		}
		wg.Wait()
		for i, c := range badCases {
			o := outcomes[i]
			if o.err != nil {
				t.Errorf("%s: %v", c.name, o.err)
				continue
			}
			if o.code != 1 {
				t.Errorf("%s: lvsd check exited %d, want 1; output:\n%s", c.name, o.code, o.out)
			}
			checkBadOutput(t, c, o.out)
		}
	})

	t.Run("running", func(t *testing.T) {
		tp := topo.New(t, topo.WithClientSources(8))
		vip := netip.MustParseAddr("10.0.0.50")
		holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
		serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
		director := tp.Director(1)
		d := newDirectorOnTmpfs(t, director, map[string]string{strings.TrimSuffix(badGoodFile, ".yaml"): badGood})
		d.start()
		d.waitServices(1, 2)
		d.waitLog(0, 10*time.Second, "msg=reconciled")
		k := d.ipvs()
		savedIPVS, savedNFT, savedAddrs := ipvsSave(t, director), run(t, director, "nft", "list", "ruleset"), addrsOf(t, director)
		savedDump := ipvsDump(t, k)
		mark := d.logSize()

		const batch = 8 // cases between two ipvsadm/nft snapshots (each an exec)
		var written []string
		for i, c := range badCases {
			// Replace the previous case's file with this one's, in that order:
			// whenever lvsd reads the folder (the 5 s poll may, too) it holds
			// the good file and at most one bad file.
			for _, p := range written {
				os.Remove(p)
			}
			path := filepath.Join(d.dir, "services.d", c.name+".yaml")
			writeAtomic(t, path, c.body)
			written = []string{path}
			off := d.logSize()
			d.hup()
			// Matching the file name ties the rejection to this case, not to a
			// late one of the previous case (the 5 s poll may also reload).
			line := d.waitLog(off, 10*time.Second, "configuration rejected", c.name+".yaml")
			if want := fmt.Sprintf("%s.yaml:%d:%d:", c.name, c.line, c.col); !strings.Contains(line, want) {
				t.Errorf("%s: the rejection does not point at %s: %s", c.name, want, line)
			}
			d.checkAlive()
			if got := ipvsDump(t, k); got != savedDump {
				t.Errorf("%s: the IPVS table changed after the rejected reload:\nbefore:\n%s\nafter:\n%s", c.name, savedDump, got)
			}
			if i%batch == batch-1 || i == len(badCases)-1 {
				if got := ipvsSave(t, director); got != savedIPVS {
					t.Errorf("after %s: ipvsadm -Sn changed:\nbefore:\n%s\nafter:\n%s", c.name, savedIPVS, got)
				}
				if got := run(t, director, "nft", "list", "ruleset"); got != savedNFT {
					t.Errorf("after %s: nft list ruleset changed:\nbefore:\n%s\nafter:\n%s", c.name, savedNFT, got)
				}
				if got := addrsOf(t, director); !slices.Equal(got, savedAddrs) {
					t.Errorf("after %s: the director's addresses are %v, were %v", c.name, got, savedAddrs)
				}
			}
		}
		// Back to the good configuration: it loads, and nothing was applied
		// at any point since the first bad file.
		for _, p := range written {
			os.Remove(p)
		}
		d.barrier()
		d.barrier()
		if ops := appliedOps(d.logSince(mark)); len(ops) > 0 {
			t.Errorf("lvsd applied ops during the bad reloads:\n%s", formatOps(ops))
		}
		if got := ipvsSave(t, director); got != savedIPVS {
			t.Errorf("at the end ipvsadm -Sn changed:\nbefore:\n%s\nafter:\n%s", savedIPVS, got)
		}
		rejected := strings.Count(d.logSince(mark), "configuration rejected")
		t.Logf("%d bad files, %d rejections logged", len(badCases), rejected)
		checkReplies(t, ask(t, tp.Client(), tp.ClientSources(false), netip.AddrPortFrom(vip, 80), echo.TCP, 1), vip)
	})
}

// lvsdCheck runs `lvsd check` (it never touches the kernel, so in any
// namespace) and returns its combined output and exit code. Safe to call
// from several goroutines.
func lvsdCheck(cfg string) (string, int, error) {
	cmd := exec.Command(lvsdBin, "check", "--config", cfg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.ProcessState == nil {
		return "", 0, fmt.Errorf("running lvsd check: %v", err)
	}
	return out.String(), cmd.ProcessState.ExitCode(), nil
}

// checkBadOutput checks lvsd check's output for one case: the first error
// is at the expected file:line:col with the expected message, and every
// error line points into the bad file (never at the good one).
func checkBadOutput(t *testing.T, c badCase, out string) {
	t.Helper()
	file := filepath.Join("services.d", c.name+".yaml")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	first := strings.TrimPrefix(lines[0], "lvsd: ")
	_, rest, found := strings.Cut(first, file+":")
	want := fmt.Sprintf("%d:%d: ", c.line, c.col)
	switch {
	case !found:
		t.Errorf("%s: the first error does not name %s:\n%s", c.name, file, out)
	case !strings.HasPrefix(rest, want):
		t.Errorf("%s: the first error is not at %s%s:\n%s", c.name, file, ":"+want, out)
	case !strings.Contains(rest, c.msg):
		t.Errorf("%s: the first error does not say %q:\n%s", c.name, c.msg, out)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(strings.SplitN(l, ": ", 2)[0], file+":") {
			t.Errorf("%s: an error line points elsewhere: %s", c.name, l)
		}
	}
}

// ipvsDump formats every IPVS service and destination read in-process (no
// exec), with weights but without connection counters, for comparisons.
func ipvsDump(t *testing.T, k *ipvs.Kernel) string {
	t.Helper()
	ctx := context.Background()
	svcs, err := k.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(svcs, func(a, b ipvs.Service) int { return a.ServiceKey.Compare(b.ServiceKey) })
	var b strings.Builder
	for _, s := range svcs {
		fmt.Fprintf(&b, "%s\n", s)
		dsts, err := k.Destinations(ctx, s.ServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dsts {
			fmt.Fprintf(&b, "  -> %s weight %d %s\n", d.DestinationKey, d.Weight, d.Forwarding)
		}
	}
	return b.String()
}
