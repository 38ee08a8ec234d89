package servicesdir

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
)

// The fuzz targets load arbitrary bytes as a service file and as an agent
// file. Besides not panicking, every input must:
//   - give problems that each name the file and a line (bar the few that
//     are about the whole file), in one line of bounded length, and a
//     syntax error the column of the offending token;
//   - while fuzzing (not when the seeds run as unit tests, which must not
//     depend on the machine's speed), take under a second of CPU and
//     allocate boundedly.
//
// make fuzz runs them for long (FUZZTIME), make unit for a few seconds.

const maxMessage = 600 // bytes of one problem's text

func FuzzServiceFile(f *testing.F) {
	for _, s := range fuzzSeeds(f, "../../../examples/services.d") {
		f.Add(s)
	}
	f.Add([]byte(svcGood + "---\n---\n" + withWeight("0x50") + "health: {checks: [{type: https, port: 443, tls: {verify: true}}]}\n"))
	// LoadFiles without the read (config's files_test.go tests reading):
	// the fuzzer then spends its time in the parser and the checks.
	const path = "/etc/lvsd/services.d/svc.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		bounded(t, len(data), func() error {
			var errs config.List
			checkSet(appendPointers(nil, config.ParseServices(path, data, &errs, false)), &errs)
			return errs.Err()
		}, path)
	})
}

func FuzzAgentFile(f *testing.F) {
	for _, s := range fuzzSeeds(f, "../../../examples") {
		f.Add(s)
	}
	f.Add([]byte("interface: eth0\nservices_dir: services.d\ncluster:\n  key_file: cluster.key\n  peers: [10.0.0.2, \"[fd00::3]:7946\"]\n  conn_sync: {port: 8848}\n"))
	f.Add([]byte("role: realserver\nrealserver:\n  vips: [10.0.0.50]\n  arp_interfaces: [eth0]\n  health: {listen: \"127.0.0.1:8080\", checks: [{address: \"127.0.0.1:80\"}]}\n"))
	// LoadAgent without the read, in a folder with a services directory
	// and a key file that the input may name.
	dir := f.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "services.d"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte(testKey+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "lvsd.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		bounded(t, len(data), func() error {
			a, err := config.ParseAgent(path, data)
			if err != nil || a.Role != config.RoleDirector {
				return err
			}
			_, err = Load(a)
			return err
		}, path)
	})
}

// bounded runs load and checks its problems and, when fuzzing, its cost.
func bounded(t *testing.T, size int, load func() error, path string) {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu := cpuTime()
	err := load()
	took := cpuTime() - cpu
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if fuzzing() {
		// CPU time, not wall time: on a busy machine a worker may wait
		// for a CPU longer than any input takes.
		if took > time.Second {
			t.Errorf("%d bytes took %v of CPU", size, took)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20+uint64(size)*2000 {
			t.Errorf("%d bytes allocated %d MiB", size, alloc>>20)
		}
	}
	if err == nil {
		return
	}
	var l config.List
	if !errors.As(err, &l) {
		t.Fatalf("error %T is not a config.List: %v", err, err)
	}
	for _, e := range l {
		wholeFile := e.Line == 0 && e.File == path
		if e.File == "" || e.Line < 1 && !wholeFile {
			t.Errorf("problem without a position: %q", e.Error())
		}
		if strings.HasPrefix(e.Msg, "YAML syntax") && e.Col < 1 {
			t.Errorf("syntax error without a column: %q", e.Error())
		}
		if strings.Contains(e.Msg, "\n") || len(e.Msg) > maxMessage {
			t.Errorf("problem of %d bytes or several lines: %q", len(e.Msg), e.Msg)
		}
		if strings.Contains(e.Msg, "<nil>") || strings.Contains(e.Msg, "map[") {
			t.Errorf("Go formatting in a problem: %q", e.Msg)
		}
	}
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// fuzzSeeds reads the YAML files of an examples folder.
func fuzzSeeds(f *testing.F, dir string) [][]byte {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var out [][]byte
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}
