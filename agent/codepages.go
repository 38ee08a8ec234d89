package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The executable's pages after a start. A cold start of 10,000 services
// runs most of lvsd's 31 MB binary once (the YAML decoder, the planner's
// every kind of op, netlink and nftables encoders), and the kernel maps
// 64 KiB around each page a fault touches: 22–23 MiB of the binary stayed
// in the resident set of a settled director, beside ~52 MiB of its own
// memory, though a steady director runs a few MiB of it. Like the heap's
// start-up garbage (settleMemory), they are handed back after the pass
// that followed a full load: the read-only mappings of the executable are
// unmapped (MADV_DONTNEED). The pages stay in the page cache, so a code
// path the steady state did not run (a takeover) maps them again with a
// minor fault each, microseconds; unmapped, they are the first file pages
// the kernel reclaims under memory pressure, before anything in use.
//
// Only mappings that are exactly the file's pages are dropped: a mapping
// with anonymous pages (a PIE binary's relocated read-only data, written
// at load before it was made read-only) would read the file's unrelocated
// bytes again. Its written pages may be swapped out (Swap, not
// Anonymous, counts them then): a mapping with either is left alone.

// mapping is one mapping of /proc/self/smaps.
type mapping struct {
	start, end uint64
	perms      string
	file       string // device and inode: "fd:01 1234"
	rss, anon  uint64 // KiB
	swap       uint64 // KiB of written pages swapped out
}

// readOnlyFilePages reports whether m holds only pages read from its
// file: private, neither writable nor shared, and none written (resident
// or swapped out).
func (m mapping) readOnlyFilePages() bool {
	return len(m.perms) == 4 && m.perms[0] == 'r' && m.perms[1] == '-' && m.perms[3] == 'p' && m.anon == 0 && m.swap == 0
}

// readSmaps parses /proc/self/smaps (r): each mapping's range,
// permissions, file, resident and anonymous sizes.
func readSmaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 {
			continue
		}
		if !bytes.HasSuffix(f[0], []byte(":")) { // a mapping's header: range perms offset dev inode [path]
			lo, hi, ok := bytes.Cut(f[0], []byte("-"))
			start, err1 := strconv.ParseUint(string(lo), 16, 64)
			end, err2 := strconv.ParseUint(string(hi), 16, 64)
			if len(f) < 5 || !ok || err1 != nil || err2 != nil || end <= start {
				return nil, fmt.Errorf("smaps: a mapping's line %q", sc.Bytes())
			}
			out = append(out, mapping{start: start, end: end, perms: string(f[1]), file: string(f[3]) + " " + string(f[4])})
			continue
		}
		if len(out) == 0 || len(f) < 2 {
			continue
		}
		m := &out[len(out)-1]
		switch string(f[0]) {
		case "Rss:":
			m.rss, _ = strconv.ParseUint(string(f[1]), 10, 64)
		case "Anonymous:":
			m.anon, _ = strconv.ParseUint(string(f[1]), 10, 64)
		case "Swap:":
			m.swap, _ = strconv.ParseUint(string(f[1]), 10, 64)
		}
	}
	return out, sc.Err()
}

// executableMappings are the mappings of the file that maps code address
// pc (the executable: found by an address of its code, as its path and
// inode in the mount namespace may not be what smaps shows, as under
// overlayfs).
func executableMappings(maps []mapping, pc uint64) []mapping {
	i := slices.IndexFunc(maps, func(m mapping) bool { return m.start <= pc && pc < m.end })
	if i < 0 || strings.HasSuffix(maps[i].file, " 0") { // inode 0: not a file
		return nil
	}
	file := maps[i].file
	return slices.DeleteFunc(slices.Clone(maps), func(m mapping) bool { return m.file != file })
}

// releaseCodePages unmaps the executable's resident pages that are the
// file's own, and returns how many KiB were resident in them.
func releaseCodePages() (uint64, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	maps, err := readSmaps(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	var released uint64
	for _, m := range executableMappings(maps, uint64(reflect.ValueOf(releaseCodePages).Pointer())) {
		if !m.readOnlyFilePages() || m.rss == 0 {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		released += m.rss
	}
	return released, nil
}
