package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestParseMemberlistLine(t *testing.T) {
	for _, c := range []struct {
		line, level, msg, from string
	}{
		{"[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=10.0.0.2:7946",
			"ERR", "Decrypt packet failed: cipher: message authentication failed from=10.0.0.2:7946", "10.0.0.2:7946"},
		{"[DEBUG] memberlist: Stream connection from=10.0.0.3:40000\n", "DEBUG", "Stream connection from=10.0.0.3:40000", "10.0.0.3:40000"},
		{"memberlist: no level", "INFO", "no level", ""},
		{"", "INFO", "", ""},
		{"[", "INFO", "[", ""},
		{"[]", "", "", ""},
		{"[WARN]", "WARN", "", ""},
		// A peer's error reply is quoted without the sender's address:
		// whatever it ends with must not crash the parser.
		{"[ERR] memberlist: Push/Pull with d2 failed: Remote error: from=", "ERR", "Push/Pull with d2 failed: Remote error: from=", ""},
		{"[ERR] memberlist: Push/Pull with d2 failed: Remote error: from=   ", "ERR", "Push/Pull with d2 failed: Remote error: from=", ""},
		{"[ERR] memberlist: Push/Pull with d2 failed: from=\t \n", "ERR", "Push/Pull with d2 failed: from=", ""},
		{"from=", "INFO", "from=", ""},
		{"from= from=", "INFO", "from= from=", ""},
		{"from= 10.0.0.2:7946", "INFO", "from= 10.0.0.2:7946", ""},
		// The address memberlist appends wins over one the peer wrote.
		{"[ERR] memberlist: Failed push/pull merge: forged from=192.0.2.1:1 from=10.0.0.2:7946",
			"ERR", "Failed push/pull merge: forged from=192.0.2.1:1 from=10.0.0.2:7946", "10.0.0.2:7946"},
	} {
		level, msg, from := parseMemberlistLine(c.line)
		if level != c.level || msg != c.msg || from != c.from {
			t.Errorf("parseMemberlistLine(%q) = %q, %q, %q; want %q, %q, %q", c.line, level, msg, from, c.level, c.msg, c.from)
		}
	}
}

// TestMemberlistLogHostileLines feeds the log writer memberlist uses lines
// whose "from=" has no value: each must be logged, not crash the director.
func TestMemberlistLogHostileLines(t *testing.T) {
	var buf bytes.Buffer
	w := &mlLog{n: &Node{log: slog.New(slog.NewTextHandler(&buf, nil))}, last: map[string]time.Time{}}
	for _, line := range []string{
		"[ERR] memberlist: Push/Pull with d2 failed: Remote error: from=\n",
		"[ERR] memberlist: Push/Pull with d2 failed: remote state is encrypted from=  \n",
		"[WARN] memberlist: from=",
	} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Errorf("Write(%q) = %d, %v", line, n, err)
		}
	}
	if !strings.Contains(buf.String(), "fail authentication") {
		t.Errorf("the authentication failure was not logged:\n%s", buf.String())
	}
}

func FuzzParseMemberlistLine(f *testing.F) {
	f.Add("[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=10.0.0.2:7946")
	f.Add("[ERR] memberlist: Push/Pull with d2 failed: Remote error: from=")
	f.Add("[WARN] memberlist: Got ping for unexpected node 'x from=' from=<unknown address>")
	f.Add("[")
	f.Fuzz(func(t *testing.T, line string) {
		level, msg, from := parseMemberlistLine(line)
		if strings.ContainsFunc(from, unicode.IsSpace) {
			t.Fatalf("from %q holds spaces", from)
		}
		if from != "" && !strings.Contains(msg, "from="+from) {
			t.Fatalf("from %q is not in the message %q", from, msg)
		}
		if !strings.Contains(line, msg) || level != "INFO" && !strings.Contains(line, "["+level+"]") {
			t.Fatalf("level %q or message %q is not from the line %q", level, msg, line)
		}
	})
}

// TestAuthFailuresLogOncePerInterval floods the log writer with
// authentication failures from many senders: one line per interval, the
// next one saying how many it left out and from how many senders, and
// every failure counted.
func TestAuthFailuresLogOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	w := &mlLog{n: &Node{log: slog.New(slog.NewTextHandler(&buf, nil))}, last: map[string]time.Time{}}
	const n = 5000
	for i := range n {
		line := fmt.Sprintf("[ERR] memberlist: failed to decrypt packet from=10.%d.%d.1:7946\n", i/256, i%256)
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(buf.String(), "fail authentication"); got != 1 {
		t.Fatalf("%d lines for %d failures in one interval, want 1:\n%s", got, n, buf.String())
	}
	if got := w.n.port.refusedPackets.Load(); got != n {
		t.Errorf("refused packets = %d, want %d", got, n)
	}
	w.auth.logged = w.auth.logged.Add(-authLogInterval)
	if _, err := w.Write([]byte("[ERR] memberlist: failed to decrypt packet from=192.0.2.1:7946\n")); err != nil {
		t.Fatal(err)
	}
	last := buf.String()[strings.LastIndex(strings.TrimSpace(buf.String()), "\n")+1:]
	for _, want := range []string{"suppressed=4999", `sources="at least 1024"`} {
		if !strings.Contains(last, want) {
			t.Errorf("the line after the interval lacks %s:\n%s", want, last)
		}
	}
}

// TestOtherLinesAreLimitedWhateverTheSender: memberlist names the sender
// in its lines; many senders must not make many lines.
func TestOtherLinesAreLimitedWhateverTheSender(t *testing.T) {
	var buf bytes.Buffer
	w := &mlLog{n: &Node{log: slog.New(slog.NewTextHandler(&buf, nil))}, last: map[string]time.Time{}}
	for i := range 3000 {
		line := fmt.Sprintf("[ERR] memberlist: failed to receive: unknown message type from=10.0.%d.%d:40000\n", i/256, i%256)
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Errorf("%d lines from 3000 senders of one message, want 1", got)
	}
}

// authHint names the likely cause of memberlist's refusals: another key,
// another label, or no label at all (junk, or a director without one).
func TestAuthHint(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"[ERR] memberlist: failed to decrypt packet from=10.0.0.9:7946", "another key"},
		{`[ERR] memberlist: discarding packet with unacceptable label "lab": from=10.0.0.9:7946`, "another cluster label"},
		{`[ERR] memberlist: discarding packet with unacceptable label "": from=203.0.113.7:4000`, "not a director at all"},
		{"[ERR] memberlist: failed to receive and remove the stream label header: EOF from=203.0.113.7:4000", "not a director at all"},
		{"[WARN] memberlist: Was able to connect to d2 over TCP but UDP probes failed", ""},
	} {
		if got := authHint(tc.msg); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("authHint(%q) = %q, want one with %q", tc.msg, got, tc.want)
		}
	}
}

// A probe that fails, or an exchange that times out, on a busy host is a
// warning; memberlist's other errors stay errors.
func TestProbeFailuresAreWarnings(t *testing.T) {
	for _, tc := range []struct{ line, level string }{
		{"[ERR] memberlist: Failed fallback TCP ping: timeout 2s: read tcp 10.0.0.3:35396->10.0.0.4:7946: i/o timeout", "WARN"},
		{"[ERR] memberlist: Failed to send UDP ping: write udp: sendto: no route to host", "WARN"},
		{"[ERR] memberlist: Failed to send gossip to 10.0.0.4:7946: write udp: i/o timeout", "WARN"},
		{"[ERR] memberlist: Push/Pull with d2 failed: dial tcp 10.0.0.4:7946: i/o timeout", "WARN"},
		{"[ERR] memberlist: Push/Pull with d2 failed: read tcp 10.0.0.3:50160->10.0.0.4:7946: i/o timeout", "WARN"},
		{"[ERR] memberlist: Push/Pull with d2 failed: dial tcp 10.0.0.4:7946: connect: connection refused", "WARN"},
		{"[ERR] memberlist: Push/Pull with d2 failed: Reading remote state failed: EOF", "ERROR"},
		{"[ERR] memberlist: Received invalid msgType (99) from=10.0.0.4:7946", "ERROR"},
	} {
		var buf bytes.Buffer
		w := &mlLog{n: &Node{log: slog.New(slog.NewTextHandler(&buf, nil))}, last: map[string]time.Time{}}
		if _, err := w.Write([]byte(tc.line + "\n")); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "level="+tc.level+" ") {
			t.Errorf("%q logged as\n%s\nwant level %s", tc.line, buf.String(), tc.level)
		}
	}
}
