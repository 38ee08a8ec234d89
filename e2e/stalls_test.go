//go:build e2e

package e2e

import (
	"regexp"
	"strings"
	"time"
)

// A director that is not scheduled cannot send heartbeats: a peer that
// declares it failed after a silence it caused itself is right, whatever
// the load test wanted to show. Under emulation (TCG) the VM's vCPU threads
// are themselves descheduled by a busy host, so a director's lvsd can stop
// for 100–250 ms whatever its nice value; its own log says so ("this
// process was not scheduled", with the stall). stallExcused tells such a
// failure declaration from a false one.

var (
	logTime    = regexp.MustCompile(`^\s*time=(\S+)`)
	stallField = regexp.MustCompile(` stall=(\S+)`)
	peerField  = regexp.MustCompile(` peer=(\S+)`)
	silence    = regexp.MustCompile(` silence=(\S+)`)
)

// stall is an interval in which a director's process did not run.
type stall struct{ from, to time.Time }

// stallsIn lists the stalls a director logged.
func stallsIn(log string) []stall {
	var out []stall
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "this process was not scheduled") {
			continue
		}
		at, ok := lineTime(line)
		d, err := time.ParseDuration(field(stallField, line))
		if ok && err == nil {
			out = append(out, stall{at.Add(-d), at})
		}
	}
	return out
}

// failureDeclaration is a "director failed: no heartbeat" line: who was
// declared failed, when, and after how long a silence.
type failureDeclaration struct {
	peer    string
	at      time.Time
	silence time.Duration
}

func failureDeclarations(log string) []failureDeclaration {
	var out []failureDeclaration
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "director failed: no heartbeat") {
			continue
		}
		at, ok := lineTime(line)
		d, err := time.ParseDuration(field(silence, line))
		if ok && err == nil {
			out = append(out, failureDeclaration{field(peerField, line), at, d})
		}
	}
	return out
}

// stallExcused reports whether the declared director was itself not
// scheduled for all but two heartbeat intervals of the silence: then it
// did not send, and the declaration was true.
func stallExcused(f failureDeclaration, stalls []stall, heartbeat time.Duration) bool {
	from := f.at.Add(-f.silence)
	var off time.Duration
	for _, s := range stalls {
		lo, hi := max(s.from.UnixNano(), from.UnixNano()), min(s.to.UnixNano(), f.at.UnixNano())
		if hi > lo {
			off += time.Duration(hi - lo)
		}
	}
	return off >= f.silence-2*heartbeat
}

func lineTime(line string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, field(logTime, line))
	return t, err == nil
}

func field(re *regexp.Regexp, line string) string {
	if m := re.FindStringSubmatch(line); m != nil {
		return strings.Trim(m[1], `"`)
	}
	return ""
}
