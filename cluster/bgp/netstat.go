package bgp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// md5Counters are the kernel's TCP-MD5 counters (TcpExt in
// /proc/net/netstat, per network namespace): a wrong password shows no
// error anywhere else. Failure counts segments with a wrong signature,
// NotFound segments without one where one was expected, Unexpected
// signed segments where none was configured.
var md5Counters = []string{"TCPMD5Failure", "TCPMD5NotFound", "TCPMD5Unexpected"}

// readNetstat reads the netstat file of the calling thread's network
// namespace (thread-self: lvsd's threads all live in one namespace, but
// tests switch threads).
func readNetstat() ([]byte, error) { return os.ReadFile("/proc/thread-self/net/netstat") }

// parseNetstat returns the TcpExt counters of a /proc/net/netstat file:
// pairs of lines, names then values.
func parseNetstat(b []byte) (map[string]uint64, error) {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) == 0 || values[0] != "TcpExt:" {
			continue
		}
		if len(names) != len(values) {
			return nil, fmt.Errorf("netstat: TcpExt has %d names and %d values", len(names), len(values))
		}
		out := make(map[string]uint64, len(names))
		for j := 1; j < len(names); j++ {
			v, err := strconv.ParseUint(values[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("netstat: TcpExt %s: %w", names[j], err)
			}
			out[names[j]] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("netstat: no TcpExt lines")
}

// md5Failures sums the TCP-MD5 counters.
func md5Failures(read func() ([]byte, error)) (uint64, error) {
	b, err := read()
	if err != nil {
		return 0, err
	}
	m, err := parseNetstat(b)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, k := range md5Counters {
		n += m[k]
	}
	return n, nil
}
