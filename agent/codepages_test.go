package agent

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestExecutableMappings(t *testing.T) {
	const smaps = `00400000-011c5000 r-xp 00000000 fd:01 1234 /usr/sbin/lvsd
Size:              14100 kB
Rss:               12000 kB
Anonymous:             0 kB
011c5000-0211d000 r--p 00dc5000 fd:01 1234 /usr/sbin/lvsd (deleted)
Rss:                9000 kB
Anonymous:             0 kB
0211d000-021b1000 rw-p 01d1d000 fd:01 1234 /usr/sbin/lvsd
Rss:                 500 kB
Anonymous:           300 kB
7f0000000000-7f0000001000 r--p 00000000 fd:02 1234 /other/fs/same/inode
Rss:                   4 kB
Anonymous:             0 kB
7f0000002000-7f0000003000 r--s 00000000 fd:01 1234 /usr/sbin/lvsd
Rss:                   4 kB
7f0000004000-7f0000006000 r--p 00000000 fd:01 1234 /usr/sbin/lvsd
Rss:                   8 kB
Anonymous:             4 kB
7f0000008000-7f000000a000 r--p 00000000 fd:01 1234 /usr/sbin/lvsd
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  8 kB
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]
Rss:                   8 kB
`
	maps, err := readSmaps(strings.NewReader(smaps))
	if err != nil {
		t.Fatal(err)
	}
	var dropped []uint64
	for _, m := range executableMappings(maps, 0x500000) {
		if m.readOnlyFilePages() {
			dropped = append(dropped, m.start)
		}
	}
	// The code, and the read-only data even where the file was deleted; not
	// the writable data, another file, a shared mapping or written pages,
	// resident or swapped out.
	if want := []uint64{0x400000, 0x11c5000}; !slices.Equal(dropped, want) {
		t.Errorf("mappings to drop start at %#x, want %#x", dropped, want)
	}
	if got := executableMappings(maps, 0x7ffc00000100); got != nil {
		t.Errorf("an address in the vdso: %+v, want no file", got)
	}
	for _, bad := range []string{"zz-11 r-xp 0 fd:01 1234 /a\n", "00400000 r-xp\n", "00500000-00400000 r-xp 0 fd:01 1 /a\n"} {
		if _, err := readSmaps(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestReleaseCodePages drops this test binary's own code pages: the
// process goes on running (the pages come back from the page cache) and
// its file-backed resident set shrinks.
func TestReleaseCodePages(t *testing.T) {
	before := rssFileKiB(t)
	released, err := releaseCodePages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("resident file pages %d KiB → %d KiB; %d KiB unmapped", before, after, released)
	if released == 0 || after >= before {
		t.Errorf("resident file pages %d KiB → %d KiB, %d KiB unmapped: want fewer resident file pages", before, after, released)
	}
}

// rssFileKiB is the process's resident file pages, from smaps_rollup
// (exact, where /proc/self/status may lag by 64 pages a thread).
func rssFileKiB(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	kib := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				kib[f[0]] = n
			}
		}
	}
	if kib["Rss:"] == 0 {
		t.Fatalf("no Rss in /proc/self/smaps_rollup:\n%s", b)
	}
	return kib["Rss:"] - kib["Anonymous:"]
}
